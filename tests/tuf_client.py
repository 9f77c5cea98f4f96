"""Independent referee for the signed index: python-tuf's ngclient (tuf 7.x).

usage: tuf_client.py BASE_URL BOOTSTRAP_ROOT CACHE_DIR TARGET...

Refreshes from BASE_URL/tuf/, verifies and downloads each TARGET, and prints one JSON
object: {"root": N, "timestamp": N, "snapshot": N, "targets": {name: {...}}}. Any
verification failure raises, which exits non-zero with python-tuf's own message.
"""

import hashlib
import json
import os
import sys

from tuf.ngclient import Updater

base_url, bootstrap_path, cache_dir, *wanted = sys.argv[1:]
meta_dir = os.path.join(cache_dir, "metadata")
download_dir = os.path.join(cache_dir, "downloads")
os.makedirs(meta_dir, exist_ok=True)
os.makedirs(download_dir, exist_ok=True)
with open(bootstrap_path, "rb") as f:
    bootstrap = f.read()

updater = Updater(
    metadata_dir=meta_dir,
    metadata_base_url=f"{base_url}/tuf/metadata/",
    target_dir=download_dir,
    target_base_url=f"{base_url}/tuf/targets/",
    bootstrap=bootstrap,
)
updater.refresh()

result = {"targets": {}}
for name in wanted:
    info = updater.get_targetinfo(name)
    if info is None:
        result["targets"][name] = None
        continue
    path = updater.download_target(info)
    with open(path, "rb") as f:
        data = f.read()
    result["targets"][name] = {
        "length": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "custom": info.custom,
        "path": path,
    }
# Trusted versions after the refresh, read back from the metadata python-tuf stored.
for role in ("root", "timestamp", "snapshot"):
    with open(os.path.join(meta_dir, f"{role}.json")) as f:
        result[role] = json.load(f)["signed"]["version"]
print(json.dumps(result))
