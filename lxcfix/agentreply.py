"""The agent's reply, as the control node reads it: a fleet host may be compromised or lie, so
its reply is bytes nobody vouches for until it is a document of the agent's shape (agent.py)
that answers the request it was sent. Pure: text in, a document or `Invalid` out.

    doc = read(body)                  # base64(zlib(JSON)), sizes checked after decompression
    doc = validate(doc, request)      # the shape for this request, or Invalid("why")
    doc == {"agent": 1, "host": "pve1", "error": None,
            "results": [{"ct": "200", "outcome": "applied", "exit": 0, "message": "CT 200: applied ...",
                         "before": "923f...", "steps": [...], ...}]}

What validate() holds a reply to:
- the request's containers: one record for `--ct`'s container (`host` for host-fix), and
  for apply --all only containers it was asked for (its lxcfix_containers, when set), each once;
- the request's kind of answer: a check run (dry_run) says a check verdict (would-apply,
  nothing-to-do, refused, failed), never "applied"; plan says planned; rollback restored;
  a real run after a confirmed check changes only the containers confirmed, from the digest
  confirmed; a would-apply carries the digest the real run is held to (`before`);
- every field its type, every diff line a unified diff's, every text bounded.
Each record's `exit` is the control node's (outcome.RUN_EXIT of its outcome), never the host's.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib

from .bounded import json_doc
from .outcome import RUN_EXIT

MAX_WIRE = 12 * 1024 * 1024  # the reply as sent (base64 of the compressed document)
MAX_REPLY = 8 * 1024 * 1024  # the document, decompressed
MAX_DEPTH = 8  # an honest reply is 4 deep: {results: [{verdict: {...}, steps: [...]}]}
MAX_VALUES = 200_000  # an honest apply --all of 1,000 containers: about 60,000
MAX_RESULTS = 10_000
MAX_TEXT = 1024 * 1024  # one message, diff, step

OUTCOMES = ("applied", "nothing-to-do", "would-apply", "would-fail", "restored", "planned", "refused", "rolled-back",
            "rollback-failed", "failed", "skipped")
CHECKED = frozenset({"would-apply", "would-fail", "nothing-to-do", "refused", "failed"})  # a check run's verdicts
CHANGED = frozenset({"applied", "rolled-back", "rollback-failed"})  # what only a confirmed container may be
_ALLOWED = {
    ("plan", False): frozenset({"planned", "nothing-to-do", "refused", "failed"}),
    ("apply", True): CHECKED,
    ("apply", False): frozenset({"applied", "nothing-to-do", "refused", "failed", "rolled-back", "rollback-failed"}),
    ("apply-all", True): CHECKED,
    ("apply-all", False): frozenset({"applied", "nothing-to-do", "refused", "failed", "rolled-back",
                                     "rollback-failed", "skipped"}),
    ("rollback", False): frozenset({"restored", "refused", "failed", "rolled-back", "rollback-failed"}),
    ("host-fix", True): CHECKED,
    ("host-fix", False): frozenset({"applied", "nothing-to-do", "refused", "failed", "rolled-back",
                                    "rollback-failed"}),
}
_DIGEST = re.compile(r"[0-9a-f]{40}")  # ctconfig.digest: sha1
_DIFF_LINE = re.compile(r"(?:--- |\+\+\+ |@@ |[ +\-\\]).*|", re.S)
_TEXT = ("message", "diff", "style", "style_reason", "path", "reached")
_VERDICT = {"ok": (bool,), "step": (str, type(None)), "exit_code": (int, type(None)), "error": (str, type(None)),
            "error_class": (str, type(None))}


class Invalid(ValueError):
    """The reply is not one the agent writes for this request: why, in one line."""


def read(body: str) -> object:
    """The reply's body (the line after `LXFA<nonce>`): base64, zlib, JSON, each bounded."""
    if len(body) > MAX_WIRE:
        raise Invalid(f"larger than {MAX_WIRE} bytes")
    try:
        packed = base64.b64decode(body.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("not base64") from None
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(packed, MAX_REPLY + 1)
    except zlib.error as e:
        raise Invalid(f"does not decompress ({e})") from None
    if len(raw) > MAX_REPLY:
        raise Invalid(f"larger than {MAX_REPLY} bytes decompressed")
    if not inflate.eof:
        raise Invalid("cut short")
    try:
        return json_doc(raw, max_depth=MAX_DEPTH, max_values=MAX_VALUES)
    except ValueError as e:
        raise Invalid(str(e)) from None


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _text(rec: dict, key: str) -> None:
    v = rec.get(key)
    if v is not None and (not isinstance(v, str) or len(v) > MAX_TEXT):
        raise Invalid(f"{key} is not text")


def _strings(v, what: str, most: int = 1000) -> list[str]:
    if not isinstance(v, list) or len(v) > most or not all(isinstance(s, str) and len(s) <= MAX_TEXT for s in v):
        raise Invalid(f"{what} is not a list of texts")
    return list(v)


def _record(rec, allowed: frozenset, expect: str | dict | None, single: str | None) -> dict:
    if not isinstance(rec, dict):
        raise Invalid("a result is not an object")
    ct, outcome = rec.get("ct"), rec.get("outcome")
    if not isinstance(ct, str) or not 0 < len(ct) <= 256:
        raise Invalid("a result has no container")
    if not isinstance(outcome, str) or outcome not in allowed:
        raise Invalid(f"CT {ct[:64]!r}: outcome {str(outcome)[:32]!r} is not one this request can have")
    if not isinstance(rec.get("message"), str):
        raise Invalid(f"CT {ct[:64]!r}: no message")
    out: dict = {"ct": ct, "outcome": outcome, "exit": RUN_EXIT[outcome]}
    for key in _TEXT:
        _text(rec, key)
        if key in rec and rec[key] is not None:
            out[key] = rec[key]
    if "diff" in out and not all(_DIFF_LINE.fullmatch(line) for line in out["diff"].split("\n")):
        raise Invalid(f"CT {ct[:64]!r}: diff has a line that is no unified diff's")
    before = rec.get("before")
    if before is not None:
        if not isinstance(before, str) or not _DIGEST.fullmatch(before):
            raise Invalid(f"CT {ct[:64]!r}: before is not a digest")
        out["before"] = before
    if outcome == "would-apply" and before is None:
        raise Invalid(f"CT {ct[:64]!r}: would-apply without the digest it was checked at")
    backup = rec.get("backup")
    if backup is not None:
        _text(rec, "backup")
        out["backup"] = backup
    if "verified" in rec:
        if not isinstance(rec["verified"], bool):
            raise Invalid(f"CT {ct[:64]!r}: verified is not true or false")
        out["verified"] = rec["verified"]
    for key in ("steps", "notes"):
        if key in rec:
            out[key] = _strings(rec[key], f"CT {ct[:64]!r}: {key}")
    if "verdict" in rec:
        v = rec["verdict"]
        if not isinstance(v, dict) or not all(isinstance(v.get(k), kinds) for k, kinds in _VERDICT.items()) \
                or (v["exit_code"] is not None and not _int(v["exit_code"])):
            raise Invalid(f"CT {ct[:64]!r}: verdict is not a check's verdict")
        out["verdict"] = {k: v[k] for k in _VERDICT}
    if outcome in CHANGED and expect is not None:
        wanted = expect if single is not None else expect.get(ct)
        if wanted is None or before != wanted:
            raise Invalid(f"CT {ct[:64]!r}: {outcome}, but that change was not the one confirmed")
    return out


def validate(doc, request: dict) -> dict:
    """doc as the agent answers `request` (see the module's doc), each record's exit the
    control node's; Invalid otherwise."""
    if not isinstance(doc, dict) or doc.get("agent") != 1 or not isinstance(doc.get("results"), list):
        raise Invalid("not an agent document")
    host = doc.get("host")
    if not isinstance(host, str) or len(host) > 256:
        raise Invalid("host is not a name")
    err = doc.get("error")
    if err is not None:
        if not (isinstance(err, dict) and isinstance(err.get("message"), str) and len(err["message"]) <= MAX_TEXT
                and err.get("exit") in (2, 3) and _int(err["exit"])):
            raise Invalid("error is not an error of the agent")
        if doc["results"]:
            raise Invalid("an error and results")
        return {"agent": 1, "host": host, "error": {"message": err["message"], "exit": err["exit"]}, "results": []}
    op, dry_run = request.get("op"), bool(request.get("dry_run")) and request.get("op") != "plan"
    allowed = _ALLOWED.get((op, dry_run if op not in ("plan", "rollback") else False))
    if allowed is None:
        raise Invalid(f"no reply is expected to op {op!r}")
    results = doc["results"]
    if len(results) > MAX_RESULTS:
        raise Invalid(f"more than {MAX_RESULTS} results")
    single = "host" if op == "host-fix" else request.get("ct") if op != "apply-all" else None
    expect = request.get("expect")
    recs = [_record(r, allowed, expect, single) for r in results]
    cts = [r["ct"] for r in recs]
    if single is not None:
        if cts != [single]:
            raise Invalid(f"one result for {single!r} was asked for; it sent {len(cts)}"
                          + (f" (for {cts[0][:64]!r})" if len(cts) == 1 else ""))
    else:
        if len(set(cts)) != len(cts):
            raise Invalid("a container's result is there twice")
        asked = request.get("cts")
        if asked is not None:
            extra = [ct for ct in cts if ct not in set(asked)]
            if extra:
                raise Invalid(f"a result for CT {extra[0][:64]!r}, which was not asked for")
    return {"agent": 1, "host": host, "error": None, "results": recs}
