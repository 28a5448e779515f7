"""Executes every notebook here top to bottom (as a class would), failing on the first error.

    python notebooks/run_all.py            # uses $SERVESIM, or the repository's build of servesim
"""
import os
import sys
import time

import nbformat
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))


def figures(nb):
    """(figures the code asks to show, images in the executed notebook's outputs)."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    asked = sum(c.source.count("plt.show()") for c in code)
    shown = sum("image/png" in o.get("data", {}) for c in code for o in c.get("outputs", []))
    return asked, shown


def main() -> int:
    names = sorted(n for n in os.listdir(HERE) if n.endswith(".ipynb"))
    if not names:
        print("no notebook found", file=sys.stderr)
        return 1
    for name in names:
        path = os.path.join(HERE, name)
        nb = nbformat.read(path, as_version=4)
        start = time.time()
        client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": HERE}})
        try:
            client.execute()
        except Exception as e:  # nbclient raises CellExecutionError with the cell's traceback
            print(f"FAILED {name}: {e}", file=sys.stderr)
            return 1
        asked, shown = figures(nb)
        if shown < asked:  # e.g. a non-interactive backend (Agg), under which plt.show() shows nothing
            print(f"FAILED {name}: {asked} figures shown with plt.show(), {shown} images in the outputs", file=sys.stderr)
            return 1
        print(f"ok {name} ({time.time() - start:.1f} s, {shown} figures)")
    print(f"{len(names)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
