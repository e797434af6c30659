"""``python -m pcast.deployed fetch``: fetch the pinned deployed-kernel wheels; ``list``: the adapters."""

import argparse
import sys

from pcast.deployed.cache import cache_dir, fetch, missing
from pcast.deployed.registry import ADAPTERS, WHEELS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pcast.deployed", description=__doc__)
    ap.add_argument("command", choices=("fetch", "list"))
    args = ap.parse_args(argv)
    if args.command == "fetch":
        fetch()
        return 0
    gone = set(missing())
    print(f"cache: {cache_dir()}")
    for a in ADAPTERS.values():
        w = WHEELS[a.wheel]
        state = "not fetched" if a.wheel in gone else "fetched"
        print(f"{a.name}: {w.dist} {w.version} {a.file} {a.function} -> preset {a.preset} ({w.licence}, {state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
