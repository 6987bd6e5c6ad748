"""Every status and category has its line in the vocabulary (harness/schema.py STATUS_MEANING,
CATEGORY_MEANING): the report's legend and docs/vocabulary.md are built from it."""

from harness.schema import CATEGORY_MEANING, STATUS_MEANING, Category, Status


def test_every_word_has_a_meaning_and_only_the_words_do():
    assert set(STATUS_MEANING) == set(Status)
    assert set(CATEGORY_MEANING) == set(Category) - {Category.NONE}
    assert all(text and not text[0].isupper() and not text.endswith(".") for text in
               [*STATUS_MEANING.values(), *CATEGORY_MEANING.values()])
