# SPDX-License-Identifier: Apache-2.0
"""The training protocol's messages on the wire (actors/PROTOCOL.md, version 6), for the worker and evaluator side.

One protocol message is one ZeroMQ message of the prsgd transport: a kind frame (b"D" for data), a header
frame (a msgpack map with short string keys) and, for RESTART and MODEL, a payload frame of raw little-endian
float32 values. This worker reads and writes f32 payloads only: its JOIN says so (`wds`), and an averager
whose job uses another wire dtype (`prsgd averager --wire-dtype`) refuses it with REFUSED. `encode_*` build
the frames a worker (or an evaluator) sends; `decode` checks what the averager sent and returns a `Message`,
or raises `ProtocolError` with one line saying what is wrong.
"""
import msgpack
import numpy as np

VERSION = 6

JOIN, WELCOME, LEAVE, HEARTBEAT, MODEL, RESTART, REMOVED, STOP, REFUSED = range(1, 10)
# 10..13 are the operator messages (STATUS, CONTROL and their replies), not spoken here.
EVALUATOR_HELLO, EVALUATE, EVALUATION = 14, 15, 16
NAMES = {JOIN: "JOIN", WELCOME: "WELCOME", LEAVE: "LEAVE", HEARTBEAT: "HEARTBEAT", MODEL: "MODEL",
         RESTART: "RESTART", REMOVED: "REMOVED", STOP: "STOP", REFUSED: "REFUSED",
         EVALUATOR_HELLO: "EVALUATOR_HELLO", EVALUATE: "EVALUATE", EVALUATION: "EVALUATION"}
# The types each side accepts.
TO_WORKER = (WELCOME, HEARTBEAT, RESTART, REMOVED, STOP, REFUSED)
TO_EVALUATOR = (EVALUATE, STOP, REFUSED)

RESTARTED_SGD, MINIBATCH_SGD = 0, 1

# The bounds of this version's decoder (actors/PROTOCOL.md, "Decoding and errors").
MAX_HEADER_BYTES = 16384
MAX_ARRAY = 512
MAX_MODEL_FLOATS = 1 << 28
MAX_STRING = 256
# Whether the averager's data fingerprint ends with the training labels' hash (" labels=<16 hex digits>").
DATA_FINGERPRINT_HAS_LABELS = True

# Transport frame kinds (transport/README.md): data, heartbeat (followed by the sender's node name), goodbye.
KIND_DATA, KIND_HEARTBEAT, KIND_BYE = b"D", b"H", b"B"

_U64 = (1 << 64) - 1


class ProtocolError(Exception):
    """A message from the averager that does not follow the protocol."""


class Message:
    """A decoded message to the worker or evaluator: `type`, the header's fields by key, and `payload` (a
    float32 numpy array for RESTART and EVALUATE, else None)."""

    __slots__ = ("type", "fields", "payload")

    def __init__(self, type_, fields, payload=None):
        self.type, self.fields, self.payload = type_, fields, payload

    def __getitem__(self, key):
        return self.fields[key]

    def get(self, key, default=None):
        return self.fields.get(key, default)

    def __repr__(self):
        return f"{NAMES.get(self.type, self.type)}({self.fields})"


def _header(type_, member, incarnation, averager_incarnation, round_, **extra):
    h = {"v": VERSION, "t": type_, "m": member, "i": incarnation, "a": averager_incarnation, "r": round_}
    h.update(extra)
    return msgpack.packb(h, use_bin_type=True)


def _clip(text):
    raw = text.encode()
    return raw[:MAX_STRING].decode(errors="ignore")


def _floats(values):
    return np.ascontiguousarray(values, dtype="<f4").reshape(-1)


def encode_join(nonce, averager_incarnation, last_round, speed_hint, model_fingerprint, data_fingerprint,
                initial_model=None):
    """initial_model: the worker's own starting model (1-d float32), sent along for a job whose averager
    takes x̄_0 from its first member (`--model external`); None sends none."""
    extra = {}
    if initial_model is not None:
        payload = _floats(initial_model)
        extra["n"] = payload.size
    header = _header(JOIN, 0, nonce, averager_incarnation, last_round, s=float(speed_hint),
                     mf=_clip(model_fingerprint), df=_clip(data_fingerprint), wds=["f32"], **extra)
    if initial_model is None:
        return [KIND_DATA, header]
    return [KIND_DATA, header, memoryview(payload).cast("B")]


def encode_evaluator_hello(nonce, averager_incarnation, model_fingerprint):
    return [KIND_DATA, _header(EVALUATOR_HELLO, 0, nonce, averager_incarnation, 0, mf=_clip(model_fingerprint))]


def encode_evaluation(nonce, averager_incarnation, round_, request, accuracy, loss=None):
    extra = {} if loss is None else {"loss": float(loss)}  # optional: without it the averager records null
    return [KIND_DATA, _header(EVALUATION, 0, nonce, averager_incarnation, round_, q=int(request),
                               acc=float(accuracy), **extra)]


def encode_heartbeat(member, nonce, averager_incarnation, round_, token):
    return [KIND_DATA, _header(HEARTBEAT, member, nonce, averager_incarnation, round_, fa=False, k=token)]


def encode_leave(member, nonce, averager_incarnation, round_, token):
    return [KIND_DATA, _header(LEAVE, member, nonce, averager_incarnation, round_, k=token)]


def encode_model(member, nonce, averager_incarnation, round_, token, params, steps, samples, loss_sum, loss_count,
                 gradient=False, cut=False):
    """params: a 1-d float32 array (the model after the round's steps, or a gradient)."""
    payload = _floats(params)
    header = _header(MODEL, member, nonce, averager_incarnation, round_, k=token, ct=bool(cut), st=int(steps),
                     sa=int(samples), ls=float(loss_sum), lc=int(loss_count), g=bool(gradient), n=payload.size)
    return [KIND_DATA, header, memoryview(payload).cast("B")]


def _field(fields, key, ok, what, default=None):
    """The header field `key` when ok(value); raises ProtocolError when it is missing (and no default) or not."""
    if key not in fields:
        if default is not None:
            return default
        raise ProtocolError(f"missing header field '{key}'")
    v = fields[key]
    if not ok(v):
        raise ProtocolError(f"header field '{key}' is not {what}: {v!r}")
    return v


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _uint(fields, key, bits=64, default=None):
    return _field(fields, key, lambda v: _is_int(v) and 0 <= v < (1 << bits), f"an unsigned {bits}-bit integer",
                  default)


def _int64(fields, key):
    return _field(fields, key, lambda v: _is_int(v) and -(1 << 63) <= v < (1 << 63), "a 64-bit integer")


def _float(fields, key):
    return float(_field(fields, key, lambda v: _is_int(v) or isinstance(v, float), "a number"))


def _bool(fields, key):
    return _field(fields, key, lambda v: isinstance(v, bool), "a bool")


def _str(fields, key):
    return _field(fields, key, lambda v: isinstance(v, str), "a string")


def _ranges(fields):
    """RESTART's sample ranges: a list of (begin, end) pairs of global positions (prsgd.order.samples_of
    maps them to sample indices), or None when the field is absent or empty (the member trains its own
    shard)."""
    raw = fields.get("ranges")
    if not raw:
        return None
    if not isinstance(raw, (list, tuple)):
        raise ProtocolError("header field 'ranges' is not a list of [begin, end) pairs")
    out = []
    for pair in raw:
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2 or
                not all(_is_int(x) and 0 <= x <= _U64 for x in pair) or
                pair[0] > pair[1]):
            raise ProtocolError(f"header field 'ranges' holds a bad range {pair!r}")
        out.append((pair[0], pair[1]))
    return out


def _pairs_first_wins(pairs):
    out = {}
    for k, v in pairs:
        if not isinstance(k, str):
            raise ProtocolError("header key is not a string")
        out.setdefault(k, v)
    return out


def decode(frames, accepted=TO_WORKER):
    """Decodes the frames after the transport's kind frame (header, optional payload) of a message sent to a
    worker (or, with accepted=TO_EVALUATOR, to an evaluator). Raises ProtocolError."""
    if not 1 <= len(frames) <= 2:
        raise ProtocolError(f"{len(frames)} frames, expected 1 or 2")
    head = bytes(frames[0])
    if not 1 <= len(head) <= MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {len(head)} bytes")
    try:
        fields = msgpack.unpackb(head, raw=False, object_pairs_hook=_pairs_first_wins, max_array_len=MAX_ARRAY,
                                 max_map_len=64, max_str_len=MAX_STRING, max_bin_len=MAX_STRING, strict_map_key=True)
    except ProtocolError:
        raise
    except Exception as e:  # msgpack raises several types for malformed input
        raise ProtocolError(f"header is not msgpack: {e}") from None
    if not isinstance(fields, dict):
        raise ProtocolError("header is not a map")
    if fields.get("v") != VERSION:
        raise ProtocolError(f"protocol version {fields.get('v')!r}, expected {VERSION}")
    type_ = fields.get("t")
    if type_ not in accepted:
        raise ProtocolError(f"message type {type_!r} is not sent to " +
                            ("workers" if accepted is TO_WORKER else "this receiver"))
    if type_ not in (RESTART, EVALUATE) and len(frames) != 1:
        raise ProtocolError(f"{NAMES[type_]} with a payload")
    f = {"m": _uint(fields, "m"), "i": _uint(fields, "i"), "a": _uint(fields, "a"), "r": _uint(fields, "r")}
    payload = None
    if type_ == WELCOME:
        f.update(ad=_uint(fields, "ad"), md=_uint(fields, "md", 8), ms=_uint(fields, "ms"), hb=_int64(fields, "hb"),
                 k=_uint(fields, "k"), sh=_uint(fields, "sh"), ns=_uint(fields, "ns"), mf=_str(fields, "mf"),
                 df=_str(fields, "df"), bs=_uint(fields, "bs"), sd=_uint(fields, "sd"))
        if f["ns"] == 0 or f["sh"] >= f["ns"]:
            raise ProtocolError(f"shard {f['sh']} of {f['ns']}")
    elif type_ == REFUSED:
        f["why"] = _str(fields, "why")
    elif type_ == HEARTBEAT:
        f.update(fa=_bool(fields, "fa"), k=_uint(fields, "k"))
    elif type_ == RESTART:
        f.update(iv=_uint(fields, "iv"), ss=_float(fields, "ss"), md=_uint(fields, "md", 8), n=_uint(fields, "n"))
        f["ranges"] = _ranges(fields)
        if fields.get("wd", "f32") != "f32" or "wb" in fields:
            raise ProtocolError(f"RESTART payload as {fields.get('wd')!r}: this worker reads f32 only")
        if f["n"] > MAX_MODEL_FLOATS:
            raise ProtocolError(f"model of {f['n']} floats is too large")
        if len(frames) != 2 or len(frames[1]) != 4 * f["n"]:
            raise ProtocolError(f"RESTART payload does not hold {f['n']} floats")
        payload = np.frombuffer(bytes(frames[1]), dtype="<f4").copy()
    elif type_ == EVALUATE:
        f.update(q=_uint(fields, "q"), n=_uint(fields, "n"))
        if f["n"] > MAX_MODEL_FLOATS:
            raise ProtocolError(f"model of {f['n']} floats is too large")
        if len(frames) != 2 or len(frames[1]) != 4 * f["n"]:
            raise ProtocolError(f"EVALUATE payload does not hold {f['n']} floats")
        payload = np.frombuffer(bytes(frames[1]), dtype="<f4").copy()
    if "md" in f and f["md"] > MINIBATCH_SGD:
        raise ProtocolError(f"training mode {f['md']}")
    return Message(type_, f, payload)
