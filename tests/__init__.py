"""The test suite. Helper modules that assert get pytest's assertion messages too."""

import pytest

pytest.register_assert_rewrite("tests.audit.helpers")
