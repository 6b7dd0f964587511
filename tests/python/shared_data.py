"""../shared/data (third-party tokenizer files and corpora, see its README) is beside the development
checkout but not beside a user's clone: tests that read it skip, naming what is missing."""
import os

import pytest

SHARED_DATA = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared",
                                            "data"))


def needs_shared(*parts):
    """Skip marker for a test that reads ../shared/data/<parts...>."""
    path = os.path.join(SHARED_DATA, *parts)
    return pytest.mark.skipif(not os.path.exists(path),
                              reason="../shared/data/%s is absent (a clone without ../shared)" % "/".join(parts))
