"""What the tests share: loopback servers and provider emulators, data generators, the CLI run as a
process, and helpers several test modules use. Test modules import from here (never from one another
or from conftest.py, which keeps only fixtures); tests/test_suite_layout.py checks that."""
