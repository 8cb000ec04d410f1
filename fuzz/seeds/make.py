#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets: fuzz/corpus/ and
protocol/fuzz/corpus/.

The protocol targets' seeds are the test vectors (protocol/tests/vectors).
The codecs' seeds are CBOR as serde writes the wire types (an enum is a
map from its variant's name, a unit variant its name as text), carrying
the vectors' envelopes and blocks; the local API's and the MCP server's
are the lines their clients send. Run from the repository's root:
python3 fuzz/seeds/make.py
"""
import json
import os
import struct


def head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    for extra, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
        if n < 1 << (8 * struct.calcsize(fmt)):
            return bytes([major << 5 | extra]) + struct.pack(fmt, n)
    raise ValueError(n)


def cbor(v):
    if v is None:
        return b"\xf6"
    if v is True:
        return b"\xf5"
    if v is False:
        return b"\xf4"
    if isinstance(v, int):
        return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, bytes):
        return head(2, len(v)) + v
    if isinstance(v, str):
        b = v.encode()
        return head(3, len(b)) + b
    if isinstance(v, list):
        return head(4, len(v)) + b"".join(cbor(x) for x in v)
    if isinstance(v, dict):
        return head(5, len(v)) + b"".join(cbor(k) + cbor(x) for k, x in v.items())
    raise TypeError(v)


def write(target, name, data, crate="fuzz"):
    d = os.path.join(crate, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def vectors(name):
    with open(os.path.join("protocol", "tests", "vectors", name + ".json")) as f:
        return json.load(f)


envelope_v, team_v, directory_v = vectors("envelope"), vectors("team"), vectors("directory")
envelopes = [bytes.fromhex(c["envelope"]) for c in envelope_v["cases"]]
blocks = {n: bytes.fromhex(b["block"]) for n, b in team_v["blocks"].items()}
records = [bytes.fromhex(c["bytes"]) for c in directory_v["cases"]]
P = "protocol/fuzz"
for i, c in enumerate(envelope_v["cases"]):
    write("envelope", f"vector-{i}", envelopes[i], P)
    write("header_body", f"header-{i}", bytes.fromhex(c["header_cbor"]), P)
    write("header_body", f"body-{i}", bytes.fromhex(c["body_cbor"]), P)
    write("report", f"body-{i}", bytes.fromhex(c["body_cbor"]), P)
for n, b in blocks.items():
    write("block", n, b, P)
for i, c in enumerate(directory_v["cases"]):
    write("directory", f"signed-{i}", records[i], P)
    write("directory", f"record-{i}", bytes.fromhex(c["payload"]), P)

peer = bytes.fromhex("0024080112") + bytes(range(32))
team = bytes(range(32))
block = blocks["genesis"]
outcomes = [
    {"Accepted": {"held": False}},
    {"Accepted": {"held": True, "deferred_until": 1_800_000_000_000}},
    "Duplicate",
    {"Refused": {"code": "revoked", "reason": "this machine was revoked"}},
    "Busy",
]

join = {
    "request": {"Request": bytes(64)},
    "poll": {"Poll": bytes(16)},
    "confirm": {"Confirm": bytes(16)},
    "decline": {"Decline": bytes(16)},
    "offer": {"Offer": bytes(64)},
    "waiting": "Waiting",
    "approved": "Approved",
    "admitted": {"Admitted": [block, blocks["admit_bob"]]},
    "done": "Done",
    "refused": {"Refused": "the pairing code did not match"},
}
sync = {
    "digest": {"Digest": {"team": team, "digest": bytes(32), "contacts": [bytes(80)],
                           "directory": [{"peer": peer, "seq": 3}]}},
    "digest-old": {"Digest": {"team": team, "digest": bytes(32), "contacts": []}},
    "fetch": {"Fetch": {"team": team, "hashes": [bytes(34), bytes(34)]}},
    "in-sync": {"InSync": {"contacts": [bytes(80)],
                           "records": [{"kind": "directory/1", "bytes": records[0]}],
                           "more_records": True}},
    "have": {"Have": {"hashes": [bytes(34)], "contacts": [], "records": [], "more_records": False}},
    "blocks": {"Blocks": {"blocks": list(blocks.values())}},
    "refused": {"Refused": "not a member"},
}
mail = {
    "batch": {"envelopes": envelopes},
    "empty": {"envelopes": []},
    "reply": {"outcomes": outcomes},
}
carry = {
    "hold": {"Hold": {"envelopes": envelopes[:1]}},
    "deliver": {"Deliver": {"envelopes": envelopes[1:]}},
    "reply": {"outcomes": outcomes},
}
for target, seeds in (("join_codec", join), ("sync_codec", sync),
                      ("mail_codec", mail), ("carry_codec", carry)):
    for name, value in seeds.items():
        write(target, name, cbor(value))

who = {"kind": "agent", "name": "claude", "session_id": "s1"}
frames = [
    {"type": "attach", "version": 1, "who": who, "mailbox": "web", "after_seq": 4},
    {"type": "request", "id": 1, "op": "status"},
    {"type": "request", "id": 2, "op": "peers", "args": {}},
    {"type": "request", "id": 3, "op": "send",
     "args": {"to": "api@laptop", "text": "hello", "ask": True}},
    {"type": "request", "id": 4, "op": "inbox", "args": {"mailbox": "web", "limit": 10}},
    {"type": "request", "id": 5, "op": "revoke", "args": {"name": "x"}},
]
lines = "".join(json.dumps(f) + "\n" for f in frames)
write("local_api", "frames", bytes([200, 7]) + lines.encode())
write("local_api", "dup-key", bytes([10, 3]) + b'{"type":"request","id":1,"op":"status","op":"shutdown"}\n')
write("local_api", "long", bytes([5, 1]) + b"x" * 40 + b"\r\n" + b'{"type":"attach"}\n' + bytes([0xff, 0xfe]) + b"\n")

init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "fuzz", "version": "1"}}}
initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def session(*calls):
    msgs = [init, initialized]
    for i, (name, args) in enumerate(calls, 1):
        msgs.append({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                     "params": {"name": name, "arguments": args}})
    return "".join(json.dumps(m) + "\n" for m in msgs).encode()


write("mcp_input", "list", session(("list_team", {}), ("list_team", {"after": "x"})))
write("mcp_input", "send", session(("send_message", {"to": "api@laptop", "text": "hi", "kind": "ask"})))
write("mcp_input", "reply", session(("reply", {"id": "00" * 16, "text": "yes"})))
write("mcp_input", "inbox", session(("check_inbox", {"limit": 5}), ("message_status", {"id": "ab" * 16})))
write("mcp_input", "broadcast", session(("broadcast", {"text": "who knows sled?"}), ("not_for_me", {"id": "cd" * 16, "note": "not mine"})))
write("mcp_input", "profile", session(("set_profile", {"profile": "rust", "goal": "ship"})))
write("mcp_input", "tools-list", session() + b'{"jsonrpc":"2.0","id":9,"method":"tools/list"}\n')
write("mcp_input", "garbage", session() + b"not json\n{\"jsonrpc\":\"2.0\",\"id\":1}\n[1,2]\n\xff\n")
