"""The loopback image server ships as ``loopwright.testing.FakeImages`` (``loopwright._fake_images``);
tests import it from here, as they do ``fake_openai``. ``python tests/support/fake_images.py
--port 8765`` runs it by hand."""

from loopwright._fake_images import DEFAULT_SIZE, FakeImages, ImageRequest, draw, main

__all__ = ["DEFAULT_SIZE", "FakeImages", "ImageRequest", "draw", "main"]

if __name__ == "__main__":
    main()
