"""Serve the floor page (perf/ui_floor.py): a Dash page holding one 3-point chart, in either form.

    python -m bench.ui_floor --port 8070 --form tuned     # then open http://127.0.0.1:8070/run/floor
"""
from __future__ import annotations

import argparse
import sys

from metrics_ui.serve import ServeConfig, serve
from perf.ui_floor import FORMS, create_app


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ui_floor", description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--form", choices=FORMS, default="tuned")
    args = ap.parse_args(argv)
    serve(create_app(args.form).server, "127.0.0.1", args.port, ServeConfig())
    return 0


if __name__ == "__main__":
    sys.exit(main())
