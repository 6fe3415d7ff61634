"""gpt2np's tests, laid out as src/gpt2np/ is: tests/<folder>/test_<module>.py tests
src/gpt2np/<folder>/<module>.py (tests/golden/test_diff.py tests the golden/diff/ package).

tests/ itself holds the tests of the top-level modules (test_model.py, test_attention.py,
test_api.py, ...) and of the project as a whole (test_layering.py, test_docs.py,
test_packaging.py, test_examples.py, test_scripts.py, test_fuzz.py). Shared helpers live in
tests/helpers/ and are imported as ``tests.helpers.<name>``; fixtures shared through pytest are in
tests/conftest.py, and the files the tests read in tests/fixtures/. Every folder is a package, so
that two test files may share a name in different folders (tests/test_attention.py and
tests/fast/test_attention.py).
"""
