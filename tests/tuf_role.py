"""python-tuf's own Metadata API, as a publisher using another TUF library would sign.

usage:
  tuf_role.py sign CURRENT_ROLE.json SPEC.json KEY.pem [KEY.pem ...]
      Prints the next version of the role: CURRENT_ROLE with SPEC applied, signed by
      each key with securesystemslib's CryptoSigner. SPEC is {"expires": "...Z",
      "add": {PATH: {"length": N, "sha256": HEX}}, "variant": NAME}; variants:
        plain                  nothing special
        custom_empty           the new target carries "custom": {}
        unrecognized           unrecognized fields at every level python-tuf keeps them
        non_nfc                a custom string that is not in Unicode NFC
        spec_2                 spec_version "2.0.0"
        signed_without_custom  signed without "custom": {}, printed with it
  tuf_role.py verify DELEGATOR.json ROLE_NAME ROLE.json
      python-tuf's verdict on ROLE.json as the delegated role ROLE_NAME of DELEGATOR
      (a targets role): prints {"ok": true} or {"ok": false, "error": "..."}.
"""

import copy
import json
import sys
from datetime import datetime, timezone

from cryptography.hazmat.primitives.serialization import load_pem_private_key
from securesystemslib.signer import CryptoSigner
from tuf.api.metadata import Metadata, TargetFile, Targets
from tuf.api.serialization.json import JSONSerializer


def sign(current_path, spec_path, key_paths):
    with open(current_path, "rb") as f:
        md = Metadata[Targets].from_bytes(f.read())
    with open(spec_path) as f:
        spec = json.load(f)
    variant = spec.get("variant", "plain")
    signed = md.signed
    signed.version += 1
    signed.expires = datetime.strptime(spec["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=timezone.utc
    )
    for path, t in spec["add"].items():
        extra = {}
        if variant == "custom_empty" or variant == "signed_without_custom":
            extra["custom"] = {}
        if variant == "non_nfc":
            # "e" followed by a combining acute accent: NFC would make it one code point.
            extra["custom"] = {"note": "caf\u0065\u0301 \u00fc\u00df \u2603"}
        if variant == "unrecognized":
            extra["custom"] = {"vendor": {"list": [1, "two", None]}}
            extra["x-target-note"] = "kept"
        signed.targets[path] = TargetFile(
            t["length"], {"sha256": t["sha256"]}, path, unrecognized_fields=extra
        )
    if variant == "unrecognized":
        signed.unrecognized_fields["x-publisher-note"] = {"reviewed": True, "by": "ci"}
    if variant == "spec_2":
        # The constructor refuses 2.0.0; a publisher's tool could still write it.
        signed.spec_version = "2.0.0"
    signers = []
    for p in key_paths:
        with open(p, "rb") as f:
            signers.append(CryptoSigner(load_pem_private_key(f.read(), password=None)))
    md.signatures.clear()
    if variant == "signed_without_custom":
        bare = copy.deepcopy(md)
        for path in spec["add"]:
            bare.signed.targets[path].unrecognized_fields.pop("custom")
        for s in signers:
            bare.sign(s, append=True)
        md.signatures.update(bare.signatures)
    else:
        for s in signers:
            md.sign(s, append=True)
    sys.stdout.buffer.write(md.to_bytes(JSONSerializer(compact=False)))


def verify(delegator_path, role_name, role_path):
    try:
        with open(delegator_path, "rb") as f:
            delegator = Metadata[Targets].from_bytes(f.read())
        with open(role_path, "rb") as f:
            role = Metadata[Targets].from_bytes(f.read())
        delegator.signed.verify_delegate(role_name, role.signed_bytes, role.signatures)
        print(json.dumps({"ok": True}))
    except Exception as e:  # every refusal python-tuf raises is the verdict
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "sign":
        sign(args[0], args[1], args[2:])
    elif command == "verify":
        verify(*args)
    else:
        sys.exit(f"unknown command {command}")
