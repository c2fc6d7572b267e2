"""Retake the README's screenshots from a running `scripts/demo`, as a user sees it.

Start the demo (`scripts/demo`), let it run a couple of minutes so the default 5-minute
views hold the steady state, then run this: it opens the runs, job and step pages of the
demo's run in headless Chromium, waits until every callback is done and every chart is
drawn (bench/ui_browser.py's test of "complete"), and saves each whole page 1280 px wide
as docs/screenshot-{runs,job,step}.png.

    scripts/demo &                       # or in another terminal
    sleep 150 && .venv/bin/python -m bench.screenshots

With `--query-run <name>` (a user's job recorded under `marketspread watch`, e.g. an example
of `examples/`), it also saves the runs page and that run's job page as
docs/screenshot-query-{runs,job}.png.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import ui_browser
from bench.output import ROOT
from collector.settings import default_state_dir

DOCS = ROOT / "docs"


def shoot(driver, path: Path) -> None:
    """Save the whole page, 1280 px wide."""
    driver.set_window_size(1280, 400)                  # short, so scrollHeight is the page's own
    time.sleep(1)
    height, chrome = driver.execute_script("return [document.documentElement.scrollHeight, "
                                           "window.outerHeight - window.innerHeight];")
    driver.set_window_size(1280, height + chrome)
    time.sleep(1.5)                                    # plotly's transitions settle
    driver.save_screenshot(str(path))
    print(f"wrote {path}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.screenshots", description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8050", help="the demo's dashboard")
    ap.add_argument("--run", help="run id (default: the demo's, from <state>/run_id)")
    ap.add_argument("--query-run", help="a user's job's run: also shoot the runs page and its job page")
    ap.add_argument("--out", type=Path, default=DOCS)
    args = ap.parse_args(argv)
    run = args.run or (default_state_dir() / "run_id").read_text().strip()
    pages = [("runs", "/"), ("job", f"/run/{run}"), ("step", f"/step/{run}/start-to-end")]
    if args.query_run:
        pages += [("query-runs", "/"), ("query-job", f"/run/{args.query_run}")]
    driver = ui_browser._driver()
    try:
        for name, path in pages:
            ui_browser.load_page(driver, args.url + path)
            shoot(driver, args.out / f"screenshot-{name}.png")
    finally:
        driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
