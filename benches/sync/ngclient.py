"""The peer of the sync benchmark: python-tuf's ngclient (tuf 7.x) doing a cold sync.

usage: ngclient.py BASE_URL BOOTSTRAP_ROOT CACHE_DIR TARGET_LIST_FILE

Refreshes from BASE_URL/tuf/ with an empty cache, then looks up, verifies and downloads
every target named in TARGET_LIST_FILE (one path per line), as a client that mirrors a
whole index must. Prints one JSON object: {"targets": N, "seconds": S}, timed from
before the refresh to after the last download (interpreter start excluded).
"""

import json
import os
import sys
import time

from tuf.ngclient import Updater

base_url, bootstrap_path, cache_dir, list_file = sys.argv[1:]
meta_dir = os.path.join(cache_dir, "metadata")
download_dir = os.path.join(cache_dir, "downloads")
os.makedirs(meta_dir, exist_ok=True)
os.makedirs(download_dir, exist_ok=True)
with open(bootstrap_path, "rb") as f:
    bootstrap = f.read()
with open(list_file) as f:
    wanted = [line.strip() for line in f if line.strip()]

started = time.perf_counter()
updater = Updater(
    metadata_dir=meta_dir,
    metadata_base_url=f"{base_url}/tuf/metadata/",
    target_dir=download_dir,
    target_base_url=f"{base_url}/tuf/targets/",
    bootstrap=bootstrap,
)
updater.refresh()
for name in wanted:
    info = updater.get_targetinfo(name)
    if info is None:
        sys.exit(f"{name}: not in the index")
    updater.download_target(info)
print(json.dumps({"targets": len(wanted), "seconds": time.perf_counter() - started}))
