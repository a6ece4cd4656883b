"""``python -m benchmarks.rendering [--check]``: re-render (or check) the generated tables."""

from benchmarks.rendering.pages import main

if __name__ == "__main__":
    raise SystemExit(main())
