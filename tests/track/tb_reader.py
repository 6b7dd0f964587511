#!/usr/bin/env python3
"""Independent reader for TensorBoard event files (``*tfevents*``).

Built from TensorBoard's real ``.proto`` definitions (copied, unchanged in
package / names / field numbers, under ``tests/track/tb_proto/``; each file
says where it came from). It needs only Debian's ``protoc`` (3.21) and
``python3-protobuf`` (3.21 / 4.21.x): no tensorflow, no tensorboard package.
The protos are compiled with ``protoc`` into a cached temp directory on first
use and loaded into a *private* descriptor pool, so nothing leaks into the
global protobuf pool.

Usage
-----
CLI::

    /usr/bin/python3 tests/track/tb_reader.py EVENTFILE     # prints JSON summary

From Python / pytest::

    import tb_reader
    recs   = tb_reader.read_event_file(path)   # list[dict], one per summary value
    report = tb_reader.summarize(path)          # dict that the CLI prints as JSON
    probs  = tb_reader.compat_problems(recs)    # list[str]; [] == TB-compatible
    raw    = tb_reader.read_records(path)       # list[bytes], CRCs verified
    evs    = tb_reader.read_events(path)        # list[Event protos]
    M      = tb_reader.messages()               # M.Event, M.Summary, M.TensorProto,
                                                # M.HParamsPluginData, M.Experiment ...

Every function that reads a file raises ``ValueError`` naming the file, the
record index and the byte offset when a record is truncated, a length or data
CRC does not match, or a record is not a valid ``Event``.

=============================================================================
HOW TENSORBOARD STORES EACH KIND OF DATA  (what a writer must produce)
=============================================================================
Sources: tensorboard/compat/proto/*.proto, tensorboard/plugins/*/metadata.py
and summary_v2.py, tensorboard/data_compat.py + dataclass_compat.py (Python
loader), tensorboard/data/server/{data_compat.rs,run.rs} ("rustboard", the
default fast loader). Where the two loaders differ, the stricter rule is given.

0. FILES AND RECORDS
--------------------
* A *run* is a directory; every file in it whose basename contains
  ``tfevents`` is read (conventional name:
  ``events.out.tfevents.<unix_secs>.<hostname>[.<pid>.<n>][suffix]``). Files
  of a run are read in lexicographic filename order. The run name is the
  directory path relative to the logdir (``.`` for the logdir itself).
* The file is a TFRecord stream. Each record, all integers little-endian::

      uint64  length                      (of data)
      uint32  masked_crc32c(length bytes) (the 8 bytes above)
      byte    data[length]                (a serialized Event)
      uint32  masked_crc32c(data)

  crc32c = CRC-32C (Castagnoli, reflected poly 0x82F63B78, init 0xFFFFFFFF,
  final xor 0xFFFFFFFF; crc32c(b"123456789") == 0xE3069283);
  masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) mod 2**32.
  A partial record at EOF is treated by TensorBoard as "not yet written"
  (it retries later, so appending + flushing whole records is safe). A bad
  length or data CRC, a record that is not a valid Event, or an Event with a
  NaN wall_time makes rustboard mark the file dead: the REST OF THAT FILE is
  never read (data/server/event_file.rs + run.rs).
* Record 0 should be ``Event{wall_time: <now>, step: 0, file_version:
  "brain.Event:2"}`` (optionally ``source_metadata{writer: "..."}``, field 10).
  TensorBoard does not strictly require it but every TF writer emits it.
* Every later record is ``Event{wall_time (1, double, unix seconds, must be
  finite), step (2, int64), summary (5): Summary{repeated Value value = 1}}``.
  One Event may carry several values; TF writes one.

Wire map of the messages a writer needs (field number: type)::

  Event           1 wall_time:double  2 step:int64  3 file_version:string
                  5 summary:Summary   10 source_metadata:SourceMetadata{1 writer:string}
  Summary         1 value:repeated Summary.Value
  Summary.Value   1 tag:string  9 metadata:SummaryMetadata   oneof value {
                  2 simple_value:float  4 image:Summary.Image
                  5 histo:HistogramProto  8 tensor:TensorProto }
  SummaryMetadata 1 plugin_data:PluginData{1 plugin_name:string 2 content:bytes}
                  2 display_name:string  3 summary_description:string
                  4 data_class:enum DataClass {UNKNOWN=0, SCALAR=1, TENSOR=2,
                                               BLOB_SEQUENCE=3}
  TensorProto     1 dtype:enum (DT_FLOAT=1, DT_DOUBLE=2, DT_INT32=3,
                  DT_STRING=7, DT_INT64=9, DT_BOOL=10)
                  2 tensor_shape:TensorShapeProto{2 dim: repeated Dim{1 size:int64}}
                  4 tensor_content:bytes (raw little-endian, row-major)
                  5 float_val:packed float  6 double_val:packed double
                  8 string_val:repeated bytes (NOT packed)
                  (rank 0 == no dim entries / tensor_shape absent)
  HistogramProto  1 min 2 max 3 num 4 sum 5 sum_squares (all double)
                  6 bucket_limit:packed double  7 bucket:packed double
  Summary.Image   1 height:int32 2 width:int32 3 colorspace:int32
                  4 encoded_image_string:bytes

Time-series metadata rule: TensorBoard takes the ``metadata`` of the FIRST
value it sees for a tag in a run and ignores metadata on later values of that
tag. So metadata must be on (at least) the first value of every tag and must
not change; repeating it on every value is allowed (this reader applies the
same first-value rule). Plugin ``content`` for scalars/histograms/text/images
is the serialized plugin message with version 0, i.e. the EMPTY byte string.

1. SCALARS   (plugin_name "scalars", data_class DATA_CLASS_SCALAR = 1)
   Either form works in both loaders:
   a) legacy:  ``Value{tag, simple_value: <float32>}``, no metadata needed
      (TensorBoard synthesizes plugin "scalars" / DATA_CLASS_SCALAR).
   b) TF2:     ``Value{tag, tensor: TensorProto{dtype: DT_FLOAT,
      tensor_shape: {} (rank 0), float_val: [v]}  (or tensor_content = 4 LE
      bytes), metadata{plugin_data{plugin_name: "scalars", content: ""},
      data_class: DATA_CLASS_SCALAR}}``.
      MUST be DT_FLOAT and rank 0 with exactly one value: rustboard turns
      DT_DOUBLE / DT_INT* / rank>0 scalar tensors into data loss (dropped).
   Values are float32 either way.

2. HISTOGRAMS   (plugin_name "histograms", data_class DATA_CLASS_TENSOR = 2)
   a) legacy:  ``Value{tag, histo: HistogramProto{min, max, num, sum,
      sum_squares, bucket_limit[k], bucket[k]}}``, no metadata needed.
      ``bucket[i]`` is the count of bucket i; ``bucket_limit[i]`` is its RIGHT
      edge; bucket 0 nominally starts at -DBL_MAX. ``bucket`` and
      ``bucket_limit`` MUST have equal length (rustboard: data loss otherwise).
      TensorBoard converts it to the tensor form below using ``min`` as the
      left edge of the first bucket and ``max`` as the right edge of the last
      (lefts = [min] + limit[:-1], rights = limit[:-1] + [max]). The Python
      loader first trims empty buckets at both ends, rustboard does not -- so
      emit only the buckets from the first non-empty to the last non-empty one
      (with min <= limit[0] and limit[-2] <= max) to render identically.
      ``num``/``sum``/``sum_squares`` are carried but not displayed.
   b) TF2:     ``Value{tag, tensor: TensorProto{dtype: DT_DOUBLE (DT_FLOAT
      also read), shape [k, 3], rows [left_edge, right_edge, count]},
      metadata{plugin_data{plugin_name: "histograms", content: ""},
      data_class: DATA_CLASS_TENSOR}}``. k == 0 for no data; one bucket
      [v-0.5, v+0.5, n] when all values are equal (TF's convention).

3. TEXT   (plugin_name "text", data_class DATA_CLASS_TENSOR = 2)
   ``Value{tag, tensor: TensorProto{dtype: DT_STRING, tensor_shape: {} (rank
   0; rank 1/2 render as a table), string_val: [<UTF-8 bytes>]},
   metadata{plugin_data{plugin_name: "text", content: "" (TextPluginData
   {version: 0})}, data_class: DATA_CLASS_TENSOR}}``. The string is rendered
   as Markdown. There is no legacy form: without the "text" metadata on the
   first value of the tag the text dashboard will not show it.

4. IMAGES   (plugin_name "images", data_class DATA_CLASS_BLOB_SEQUENCE = 3)
   a) legacy:  ``Value{tag, image: Summary.Image{height, width, colorspace
      (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA; ignored by TensorBoard),
      encoded_image_string: <PNG/JPEG/GIF bytes the browser can decode>}}``,
      no metadata needed. TensorBoard converts it to the tensor form
      [str(width), str(height), encoded].
   b) TF2:     ``Value{tag, tensor: TensorProto{dtype: DT_STRING, shape [2+n]
      (rank 1 is REQUIRED), string_val: [b"<width>", b"<height>", png_0, ...,
      png_{n-1}]}, metadata{plugin_data{plugin_name: "images", content: ""},
      data_class: DATA_CLASS_BLOB_SEQUENCE}}``. Note WIDTH FIRST, as ASCII
      decimal. All n images share that width/height.

5. HPARAMS   (plugin_name "hparams"; data_class DATA_CLASS_TENSOR = 2)
   Three special tags; each value carries the data only in
   ``metadata.plugin_data.content`` = serialized
   ``tensorboard.hparams.HParamsPluginData{version: 0 (MUST be 0), oneof data
   {experiment = 2, session_start_info = 3, session_end_info = 4}}``.
   The value itself is EITHER left unset (what TF's hparams API writes; both
   loaders substitute the null tensor) OR set to the null tensor
   ``TensorProto{dtype: DT_FLOAT, tensor_shape{dim{size: 0}}}``;
   data_class either unset (both loaders fill in TENSOR for plugin "hparams")
   or DATA_CLASS_TENSOR. Safest: null tensor + DATA_CLASS_TENSOR. Write at
   step 0. The plugin_name is "hparams".

   * ``_hparams_/session_start_info`` -- one per trial, in the trial's run
     (directory). ``SessionStartInfo{hparams (1): map<string,
     google.protobuf.Value>, model_uri (2), monitor_url (3), group_name (4),
     start_time_secs (5, double)}``. Value kinds: number_value (field 2,
     double; use it for ints and floats), string_value (3), bool_value (4).
     Map entries are ``{1: key string, 2: value Value}``. group_name may be
     empty (then the group is the session itself; TF uses the sha256 hex of
     ``json.dumps(hparams, sort_keys=True, separators=(",", ":"))``).
   * ``_hparams_/session_end_info`` -- optional, same run:
     ``SessionEndInfo{status (1): STATUS_UNKNOWN=0 | STATUS_SUCCESS=1 |
     STATUS_FAILURE=2 | STATUS_RUNNING=3, end_time_secs (2, double)}``.
   * ``_hparams_/experiment`` -- OPTIONAL. The HPARAMS tab appears as soon
     as any time series with plugin_name "hparams" exists (the plugin's
     is_active() is False; TensorBoard core's list_plugins decides), so a
     session_start_info alone is enough. Without an experiment tag
     TensorBoard infers the columns: hparams from all session_start_infos
     (number -> FLOAT64 interval [min, max]; string/bool -> discrete), and
     metrics from every *scalar* tag in the session's run (group "") and its
     sub-directory runs (group = relative sub-path). If written (any run;
     TF puts it in the logdir root run; the first one found wins), it is used
     verbatim and only the hparams / metrics it lists become columns:
     ``Experiment{description (1), user (2), time_created_secs (3),
     hparam_infos (4): [HParamInfo{name (1), display_name (2), description
     (3), type (4): DATA_TYPE_UNSET=0 | STRING=1 | BOOL=2 | FLOAT64=3,
     oneof domain {domain_discrete (5): google.protobuf.ListValue,
     domain_interval (6): Interval{min_value (1), max_value (2)}}}],
     metric_infos (5): [MetricInfo{name (1): MetricName{group (1), tag (2)},
     display_name (3), description (4), dataset_type (5): UNKNOWN=0 |
     TRAINING=1 | VALIDATION=2}], name (6)}``.
   Metric values shown in the table are the session run's ordinary scalars.

Returned record dicts (``read_event_file``); every dict has ``kind``,
``index`` (record index), ``wall_time``, ``step`` and, for summary values,
``tag``, ``plugin_name`` and ``data_class`` (name of the effective
SummaryMetadata.data_class as stored, e.g. "DATA_CLASS_SCALAR") and
``form`` (which ``Value.value`` oneof was set, or None):

* ``file_version``: file_version, source_writer
* ``scalar``:  value (float)
* ``histogram``: min, max, num, sum, sum_squares, bucket_limit, bucket
  (tensor form: bucket_limit = right edges, bucket = counts, min = first
  left edge, max = last right edge, num = sum of counts, sum / sum_squares
  None; ``buckets`` = [[left, right, count], ...] for both forms; for the
  legacy form it is derived exactly as rustboard does)
* ``text``: text (first string, UTF-8 decoded), strings (all), shape
* ``image``: height, width, colorspace, encoded_len (of the first image),
  encoded_lens, image_format ("png" / "jpeg" / "gif" / "unknown")
* ``hparams``: version, data ("experiment" | "session_start_info" |
  "session_end_info" | None), plus for session_start_info: hparams
  ({name: float | str | bool | None}), start_time_secs, group_name,
  model_uri, monitor_url; for session_end_info: status (enum name),
  end_time_secs; for experiment: hparam_infos (list of dicts with name,
  display_name, description, type, domain_discrete | domain_interval),
  metric_infos (list of dicts with group, tag, display_name, description,
  dataset_type), time_created_secs, description, user, name
* ``tensor`` (a tensor value of another plugin): dtype, shape, values
* ``other``: anything else (session_log, graph_def, unknown values)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import struct_pb2

PROTO_ROOT = Path(__file__).resolve().parent / "tb_proto"

PROTO_FILES = [
    "tensorboard/compat/proto/types.proto",
    "tensorboard/compat/proto/tensor_shape.proto",
    "tensorboard/compat/proto/resource_handle.proto",
    "tensorboard/compat/proto/tensor.proto",
    "tensorboard/compat/proto/histogram.proto",
    "tensorboard/compat/proto/summary.proto",
    "tensorboard/compat/proto/event.proto",
    "tensorboard/plugins/hparams/api.proto",
    "tensorboard/plugins/hparams/plugin_data.proto",
    "tensorboard/plugins/scalar/plugin_data.proto",
    "tensorboard/plugins/histogram/plugin_data.proto",
    "tensorboard/plugins/image/plugin_data.proto",
    "tensorboard/plugins/text/plugin_data.proto",
]

# Plugin names and tags exactly as TensorBoard spells them.
PLUGIN_SCALARS = "scalars"
PLUGIN_HISTOGRAMS = "histograms"
PLUGIN_TEXT = "text"
PLUGIN_IMAGES = "images"
PLUGIN_HPARAMS = "hparams"
HPARAMS_EXPERIMENT_TAG = "_hparams_/experiment"
HPARAMS_SESSION_START_INFO_TAG = "_hparams_/session_start_info"
HPARAMS_SESSION_END_INFO_TAG = "_hparams_/session_end_info"
FILE_VERSION = "brain.Event:2"

# ---------------------------------------------------------------------------
# CRC-32C (Castagnoli), table driven, pure Python.
# ---------------------------------------------------------------------------
_CRC32C_POLY = 0x82F63B78  # reflected 0x1EDC6F41


def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _CRC32C_POLY if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_CRC32C_TABLE = _make_table()


def crc32c(data: bytes) -> int:
    """Plain CRC-32C of ``data`` (crc32c(b"123456789") == 0xE3069283)."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2**32."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# ---------------------------------------------------------------------------
# Proto compilation (protoc -> FileDescriptorSet -> private pool).
# ---------------------------------------------------------------------------
_MESSAGES = None


def _wkt_descriptor_set() -> bytes:
    """google/protobuf/struct.proto as a FileDescriptorSet.

    Debian's protobuf-compiler does not ship the well-known-type .proto
    sources (they live in libprotobuf-dev), so hand protoc the descriptor
    that python3-protobuf carries, via --descriptor_set_in.
    """
    fds = descriptor_pb2.FileDescriptorSet()
    struct_pb2.DESCRIPTOR.CopyToProto(fds.file.add())
    return fds.SerializeToString()


def _proto_digest() -> str:
    h = hashlib.sha256()
    for rel in PROTO_FILES:
        h.update(rel.encode())
        h.update((PROTO_ROOT / rel).read_bytes())
    try:
        h.update(subprocess.run(["protoc", "--version"], capture_output=True,
                                check=True).stdout)
    except (OSError, subprocess.CalledProcessError) as e:  # pragma: no cover
        raise RuntimeError("protoc is required (Debian package protobuf-compiler)") from e
    return h.hexdigest()[:16]


def compile_protos(out_dir: str | os.PathLike | None = None, python_out: bool = False) -> Path:
    """Run protoc on tb_proto/ and return the path of the descriptor set.

    The result is cached in ``$TMPDIR/foundry_tb_proto_<digest>/``. With
    ``python_out=True`` the generated ``*_pb2.py`` modules are also written
    there (not needed by this reader; used by the self-test to prove the
    files compile with ``protoc --python_out``).
    """
    digest = _proto_digest()
    cache = Path(out_dir) if out_dir else Path(tempfile.gettempdir()) / f"foundry_tb_proto_{digest}"
    desc = cache / "tb_protos.desc"
    if desc.exists() and not python_out:
        return desc
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tbp_", dir=cache))
    try:
        wkt = work / "wkt.desc"
        wkt.write_bytes(_wkt_descriptor_set())
        cmd = ["protoc", f"-I{PROTO_ROOT}", f"--descriptor_set_in={wkt}",
               f"--descriptor_set_out={work / 'tb_protos.desc'}", "--include_imports"]
        if python_out:
            (work / "py").mkdir()
            cmd.append(f"--python_out={work / 'py'}")
        cmd += PROTO_FILES
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"protoc failed ({r.returncode}):\n{r.stderr}")
        if python_out:
            if (cache / "py").exists():
                shutil.rmtree(cache / "py", ignore_errors=True)
            os.replace(work / "py", cache / "py")
        os.replace(work / "tb_protos.desc", desc)  # atomic: safe with parallel tests
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return desc


def messages() -> types.SimpleNamespace:
    """Message classes built from the compiled protos (private pool).

    Attributes: Event, SourceMetadata, SessionLog, Summary, SummaryMetadata,
    HistogramProto, TensorProto, TensorShapeProto, HParamsPluginData,
    SessionStartInfo, SessionEndInfo, Experiment, HParamInfo, MetricInfo,
    MetricName, Interval, Value, ListValue, ScalarPluginData,
    HistogramPluginData, ImagePluginData, TextPluginData; and the enum
    descriptors DataType, DataClass, HParamsDataType, DatasetType, Status.
    """
    global _MESSAGES
    if _MESSAGES is not None:
        return _MESSAGES
    fds = descriptor_pb2.FileDescriptorSet.FromString(compile_protos().read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for fdp in fds.file:  # --include_imports lists dependencies first
        pool.AddSerializedFile(fdp.SerializeToString())

    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is None:  # protobuf < 4.22
        factory = message_factory.MessageFactory(pool)
        get_class = factory.GetPrototype

    def cls(name):
        return get_class(pool.FindMessageTypeByName(name))

    ns = types.SimpleNamespace()
    for attr, full in [
        ("Event", "tensorboard.Event"),
        ("SourceMetadata", "tensorboard.SourceMetadata"),
        ("SessionLog", "tensorboard.SessionLog"),
        ("Summary", "tensorboard.Summary"),
        ("SummaryMetadata", "tensorboard.SummaryMetadata"),
        ("HistogramProto", "tensorboard.HistogramProto"),
        ("TensorProto", "tensorboard.TensorProto"),
        ("TensorShapeProto", "tensorboard.TensorShapeProto"),
        ("ScalarPluginData", "tensorboard.ScalarPluginData"),
        ("HistogramPluginData", "tensorboard.HistogramPluginData"),
        ("ImagePluginData", "tensorboard.ImagePluginData"),
        ("TextPluginData", "tensorboard.TextPluginData"),
        ("HParamsPluginData", "tensorboard.hparams.HParamsPluginData"),
        ("SessionStartInfo", "tensorboard.hparams.SessionStartInfo"),
        ("SessionEndInfo", "tensorboard.hparams.SessionEndInfo"),
        ("Experiment", "tensorboard.hparams.Experiment"),
        ("HParamInfo", "tensorboard.hparams.HParamInfo"),
        ("MetricInfo", "tensorboard.hparams.MetricInfo"),
        ("MetricName", "tensorboard.hparams.MetricName"),
        ("Interval", "tensorboard.hparams.Interval"),
        ("Value", "google.protobuf.Value"),
        ("ListValue", "google.protobuf.ListValue"),
    ]:
        setattr(ns, attr, cls(full))
    ns.DataType = pool.FindEnumTypeByName("tensorboard.DataType")
    ns.DataClass = pool.FindEnumTypeByName("tensorboard.DataClass")
    ns.HParamsDataType = pool.FindEnumTypeByName("tensorboard.hparams.DataType")
    ns.DatasetType = pool.FindEnumTypeByName("tensorboard.hparams.DatasetType")
    ns.Status = pool.FindEnumTypeByName("tensorboard.hparams.Status")
    ns.pool = pool
    _MESSAGES = ns
    return ns


# ---------------------------------------------------------------------------
# TFRecord framing.
# ---------------------------------------------------------------------------
def iter_records(data: bytes, name: str = "<bytes>"):
    """Yield (index, offset, payload) for each record; verify both CRCs."""
    off = 0
    idx = 0
    n = len(data)
    while off < n:
        if n - off < 12:
            raise ValueError(f"{name}: record {idx} at byte offset {off}: truncated header "
                             f"({n - off} of 12 bytes present)")
        len_bytes = data[off:off + 8]
        (length,) = struct.unpack("<Q", len_bytes)
        (len_crc,) = struct.unpack("<I", data[off + 8:off + 12])
        want = masked_crc32c(len_bytes)
        if len_crc != want:
            raise ValueError(f"{name}: record {idx} at byte offset {off}: length CRC mismatch "
                             f"(stored 0x{len_crc:08x}, computed 0x{want:08x}; length field "
                             f"reads {length})")
        start = off + 12
        end = start + length
        if end + 4 > n:
            raise ValueError(f"{name}: record {idx} at byte offset {off}: truncated data "
                             f"(length {length} needs {length + 4} more bytes, "
                             f"{max(0, n - start)} present)")
        payload = data[start:end]
        (data_crc,) = struct.unpack("<I", data[end:end + 4])
        want = masked_crc32c(payload)
        if data_crc != want:
            raise ValueError(f"{name}: record {idx} at byte offset {off}: data CRC mismatch "
                             f"(stored 0x{data_crc:08x}, computed 0x{want:08x}, "
                             f"{length} data bytes)")
        yield idx, off, payload
        off = end + 4
        idx += 1


def read_records(path) -> list:
    """All record payloads of a TFRecord file, CRC-verified."""
    data = Path(path).read_bytes()
    return [p for _, _, p in iter_records(data, str(path))]


def encode_record(payload: bytes) -> bytes:
    """One TFRecord record (helper for tests that need to build files)."""
    length = struct.pack("<Q", len(payload))
    return (length + struct.pack("<I", masked_crc32c(length)) + payload
            + struct.pack("<I", masked_crc32c(payload)))


def read_events(path) -> list:
    """All records parsed as ``tensorboard.Event`` (== tensorflow.Event)."""
    M = messages()
    data = Path(path).read_bytes()
    out = []
    for idx, off, payload in iter_records(data, str(path)):
        ev = M.Event()
        try:
            ev.ParseFromString(payload)
        except Exception as e:  # DecodeError
            raise ValueError(f"{path}: record {idx} at byte offset {off}: not a valid "
                             f"Event proto: {e}") from e
        out.append(ev)
    return out


# ---------------------------------------------------------------------------
# Tensor decoding.
# ---------------------------------------------------------------------------
_CONTENT_FMT = {1: "f", 2: "d", 3: "i", 4: "B", 5: "h", 6: "b", 9: "q", 10: "?",
                17: "H", 22: "I", 23: "Q"}


def tensor_shape(tp) -> list:
    return [d.size for d in tp.tensor_shape.dim]


def tensor_values(tp) -> list:
    """Flattened values of a TensorProto (row-major), version-0 broadcast applied."""
    shape = tensor_shape(tp)
    count = 1
    for s in shape:
        count *= max(s, 0)
    dt = tp.dtype
    if dt == 7:  # DT_STRING
        vals = list(tp.string_val)
    elif tp.tensor_content:
        fmt = _CONTENT_FMT.get(dt)
        if fmt is None:
            raise ValueError(f"cannot decode tensor_content for dtype {dt}")
        size = struct.calcsize(fmt)
        if len(tp.tensor_content) % size:
            raise ValueError(f"tensor_content length {len(tp.tensor_content)} is not a "
                             f"multiple of {size} for dtype {dt}")
        vals = [v[0] for v in struct.iter_unpack("<" + fmt, tp.tensor_content)]
    else:
        field = {1: "float_val", 2: "double_val", 3: "int_val", 4: "int_val", 5: "int_val",
                 6: "int_val", 9: "int64_val", 10: "bool_val", 17: "int_val",
                 22: "uint32_val", 23: "uint64_val", 19: "half_val", 14: "half_val"}.get(dt)
        vals = list(getattr(tp, field)) if field else []
    if len(vals) == 1 and count > 1:  # version-0 broadcast
        vals = vals * count
    return vals


def _image_format(b: bytes) -> str:
    if b.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if b.startswith(b"\xff\xd8"):
        return "jpeg"
    if b.startswith(b"GIF8"):
        return "gif"
    return "unknown"


def _pyvalue(v):
    """google.protobuf.Value -> Python (float/str/bool/None/list/dict)."""
    kind = v.WhichOneof("kind")
    if kind == "number_value":
        return v.number_value
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "list_value":
        return [_pyvalue(x) for x in v.list_value.values]
    if kind == "struct_value":
        return {k: _pyvalue(x) for k, x in v.struct_value.fields.items()}
    return None


def _enum_name(enum_desc, number):
    ev = enum_desc.values_by_number.get(number)
    return ev.name if ev else number


# ---------------------------------------------------------------------------
# High-level decoding.
# ---------------------------------------------------------------------------
def _decode_hparams(M, content: bytes) -> dict:
    pd = M.HParamsPluginData()
    pd.ParseFromString(content)
    out = {"version": pd.version, "data": pd.WhichOneof("data")}
    if out["data"] == "session_start_info":
        s = pd.session_start_info
        out.update(hparams={k: _pyvalue(v) for k, v in sorted(s.hparams.items())},
                   start_time_secs=s.start_time_secs, group_name=s.group_name,
                   model_uri=s.model_uri, monitor_url=s.monitor_url)
    elif out["data"] == "session_end_info":
        s = pd.session_end_info
        out.update(status=_enum_name(M.Status, s.status), end_time_secs=s.end_time_secs)
    elif out["data"] == "experiment":
        e = pd.experiment
        infos = []
        for h in e.hparam_infos:
            d = {"name": h.name, "display_name": h.display_name,
                 "description": h.description, "type": _enum_name(M.HParamsDataType, h.type)}
            dom = h.WhichOneof("domain")
            if dom == "domain_discrete":
                d["domain_discrete"] = [_pyvalue(v) for v in h.domain_discrete.values]
            elif dom == "domain_interval":
                d["domain_interval"] = [h.domain_interval.min_value,
                                        h.domain_interval.max_value]
            infos.append(d)
        metrics = [{"group": m.name.group, "tag": m.name.tag,
                    "display_name": m.display_name, "description": m.description,
                    "dataset_type": _enum_name(M.DatasetType, m.dataset_type)}
                   for m in e.metric_infos]
        out.update(hparam_infos=infos, metric_infos=metrics,
                   time_created_secs=e.time_created_secs, description=e.description,
                   user=e.user, name=e.name)
    return out


def _histo_buckets(h):
    """Legacy HistogramProto -> [[left, right, count]] exactly as rustboard does."""
    n = len(h.bucket)
    if n != len(h.bucket_limit):
        return None
    edges = list(h.bucket_limit[:max(n - 1, 0)])
    lefts = [h.min] + edges
    rights = edges + [h.max]
    return [[l, r, c] for l, r, c in zip(lefts, rights, h.bucket)]


def decode_event(M, ev, idx: int, tag_meta: dict) -> list:
    """Decode one Event into record dicts. ``tag_meta`` keeps first metadata per tag."""
    base = {"index": idx, "wall_time": ev.wall_time, "step": ev.step}
    what = ev.WhichOneof("what")
    if what == "file_version":
        return [dict(base, kind="file_version", file_version=ev.file_version,
                     source_writer=ev.source_metadata.writer)]
    if what != "summary":
        d = dict(base, kind="other", what=what)
        if what == "session_log":
            d["status"] = _enum_name(M.SessionLog.DESCRIPTOR.enum_types_by_name["SessionStatus"],
                                     ev.session_log.status)
        return [d]
    out = []
    for v in ev.summary.value:
        if v.tag not in tag_meta:
            md = M.SummaryMetadata()
            if v.HasField("metadata"):
                md.CopyFrom(v.metadata)
            tag_meta[v.tag] = md
        md = tag_meta[v.tag]
        form = v.WhichOneof("value")
        plugin = md.plugin_data.plugin_name
        d = dict(base, tag=v.tag, form=form, plugin_name=plugin,
                 data_class=_enum_name(M.DataClass, md.data_class),
                 has_metadata=v.HasField("metadata"))
        if form == "simple_value":
            d.update(kind="scalar", value=v.simple_value)
        elif form == "histo":
            h = v.histo
            d.update(kind="histogram", min=h.min, max=h.max, num=h.num, sum=h.sum,
                     sum_squares=h.sum_squares, bucket_limit=list(h.bucket_limit),
                     bucket=list(h.bucket), buckets=_histo_buckets(h))
        elif form == "image":
            im = v.image
            d.update(kind="image", height=im.height, width=im.width,
                     colorspace=im.colorspace, encoded_len=len(im.encoded_image_string),
                     encoded_lens=[len(im.encoded_image_string)],
                     image_format=_image_format(im.encoded_image_string))
        elif plugin == PLUGIN_HPARAMS:
            d.update(kind="hparams")
            if form == "tensor":
                d["tensor_dtype"] = _enum_name(M.DataType, v.tensor.dtype)
                d["tensor_shape"] = tensor_shape(v.tensor)
            # The hparams payload lives in the metadata of *this* value (TF
            # writes it on every hparams value); fall back to the tag's first.
            content = (v.metadata.plugin_data.content if v.HasField("metadata")
                       else md.plugin_data.content)
            d.update(_decode_hparams(M, content))
        elif form == "tensor":
            tp = v.tensor
            shape = tensor_shape(tp)
            dtype = _enum_name(M.DataType, tp.dtype)
            if plugin == PLUGIN_SCALARS:
                vals = tensor_values(tp)
                d.update(kind="scalar", value=float(vals[0]) if len(vals) == 1 else None,
                         tensor_dtype=dtype, tensor_shape=shape)
            elif plugin == PLUGIN_HISTOGRAMS:
                vals = tensor_values(tp)
                rows = [vals[i:i + 3] for i in range(0, len(vals), 3)]
                counts = [r[2] for r in rows]
                d.update(kind="histogram", tensor_dtype=dtype, tensor_shape=shape,
                         buckets=rows, bucket_limit=[r[1] for r in rows], bucket=counts,
                         min=rows[0][0] if rows else None, max=rows[-1][1] if rows else None,
                         num=float(sum(counts)), sum=None, sum_squares=None)
            elif plugin == PLUGIN_TEXT:
                strings = [s.decode("utf-8", "replace") for s in tensor_values(tp)]
                d.update(kind="text", text=strings[0] if strings else None,
                         strings=strings, tensor_dtype=dtype, shape=shape)
            elif plugin == PLUGIN_IMAGES:
                sv = list(tp.string_val)
                imgs = sv[2:]

                def _int(b):
                    try:
                        return int(b)
                    except ValueError:
                        return None
                d.update(kind="image", tensor_dtype=dtype, tensor_shape=shape,
                         width=_int(sv[0]) if len(sv) > 0 else None,
                         height=_int(sv[1]) if len(sv) > 1 else None, colorspace=None,
                         encoded_len=len(imgs[0]) if imgs else None,
                         encoded_lens=[len(b) for b in imgs],
                         image_format=_image_format(imgs[0]) if imgs else None)
            else:
                vals = tensor_values(tp)
                d.update(kind="tensor", tensor_dtype=dtype, shape=shape,
                         values=[x.decode("utf-8", "replace") if isinstance(x, bytes) else x
                                 for x in vals])
        else:
            d.update(kind="other")
        out.append(d)
    return out


def read_event_file(path) -> list:
    """Read and CRC-check ``path``; return one dict per file_version / summary value.

    See the module docstring for the dict shapes. Raises ValueError on any
    truncation, CRC mismatch or unparsable record.
    """
    M = messages()
    tag_meta = {}
    recs = []
    for idx, ev in enumerate(read_events(path)):
        recs.extend(decode_event(M, ev, idx, tag_meta))
    return recs


# ---------------------------------------------------------------------------
# Compatibility checks: what TensorBoard would drop or misread.
# ---------------------------------------------------------------------------
def compat_problems(recs: list) -> list:
    """Problems that would make TensorBoard drop or misread data. [] == OK."""
    probs = []
    if not recs or recs[0].get("kind") != "file_version":
        probs.append("record 0 is not a file_version event")
    elif not recs[0]["file_version"].startswith("brain.Event:"):
        probs.append(f"file_version {recs[0]['file_version']!r} does not start with 'brain.Event:'")
    for r in recs:
        where = f"record {r['index']} tag {r.get('tag')!r}"
        wt = r.get("wall_time")
        if wt is None or not math.isfinite(wt):
            probs.append(f"{where}: wall_time {wt!r} is not finite")
        k = r["kind"]
        dc = r.get("data_class")
        form = r.get("form")
        if k == "scalar" and form == "tensor":
            if r.get("tensor_dtype") != "DT_FLOAT" or r.get("tensor_shape") or r["value"] is None:
                probs.append(f"{where}: scalar tensor must be DT_FLOAT rank 0 with one value "
                             f"(got {r.get('tensor_dtype')} shape {r.get('tensor_shape')})")
            if dc not in ("DATA_CLASS_SCALAR", "DATA_CLASS_UNKNOWN"):
                probs.append(f"{where}: scalars need data_class DATA_CLASS_SCALAR, got {dc}")
        elif k == "histogram":
            if form == "histo" and r["buckets"] is None:
                probs.append(f"{where}: bucket and bucket_limit lengths differ")
            if form == "tensor":
                sh = r.get("tensor_shape") or []
                if len(sh) != 2 or sh[1] != 3 or r["tensor_dtype"] not in ("DT_DOUBLE", "DT_FLOAT"):
                    probs.append(f"{where}: histogram tensor must be DT_DOUBLE/DT_FLOAT [k,3], "
                                 f"got {r['tensor_dtype']} {sh}")
                if dc not in ("DATA_CLASS_TENSOR", "DATA_CLASS_UNKNOWN"):
                    probs.append(f"{where}: histograms need DATA_CLASS_TENSOR, got {dc}")
        elif k == "text":
            if r.get("tensor_dtype") != "DT_STRING":
                probs.append(f"{where}: text tensor must be DT_STRING")
            if dc not in ("DATA_CLASS_TENSOR", "DATA_CLASS_UNKNOWN"):
                probs.append(f"{where}: text needs DATA_CLASS_TENSOR, got {dc}")
        elif k == "image":
            if form == "tensor":
                sh = r.get("tensor_shape") or []
                if r["tensor_dtype"] != "DT_STRING" or len(sh) != 1 or r["width"] is None \
                        or r["height"] is None:
                    probs.append(f"{where}: image tensor must be rank-1 DT_STRING "
                                 f"[width, height, img...], got {r['tensor_dtype']} {sh}")
                if dc not in ("DATA_CLASS_BLOB_SEQUENCE", "DATA_CLASS_UNKNOWN"):
                    probs.append(f"{where}: images need DATA_CLASS_BLOB_SEQUENCE, got {dc}")
            if r.get("image_format") == "unknown":
                probs.append(f"{where}: encoded image is not PNG/JPEG/GIF")
        elif k == "hparams":
            if r["version"] != 0:
                probs.append(f"{where}: HParamsPluginData.version must be 0, got {r['version']}")
            want = {HPARAMS_EXPERIMENT_TAG: "experiment",
                    HPARAMS_SESSION_START_INFO_TAG: "session_start_info",
                    HPARAMS_SESSION_END_INFO_TAG: "session_end_info"}.get(r["tag"])
            if want is None:
                probs.append(f"{where}: hparams data under a non-standard tag")
            elif r["data"] != want:
                probs.append(f"{where}: tag needs HParamsPluginData.{want}, got {r['data']}")
            if dc not in ("DATA_CLASS_TENSOR", "DATA_CLASS_UNKNOWN"):
                probs.append(f"{where}: hparams need DATA_CLASS_TENSOR or unset, got {dc}")
            if form not in (None, "tensor"):
                probs.append(f"{where}: hparams value must be unset or a tensor, got {form}")
        elif k == "tensor" and not r.get("plugin_name"):
            probs.append(f"{where}: tensor value without plugin metadata")
    return probs


# ---------------------------------------------------------------------------
# Summary / CLI.
# ---------------------------------------------------------------------------
def summarize(path) -> dict:
    """JSON-able summary: counts per kind, per-tag series, and all records."""
    recs = read_event_file(path)
    counts = {}
    tags = {}
    for r in recs:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
        if "tag" in r:
            t = tags.setdefault(r["tag"], {"kind": r["kind"], "plugin_name": r["plugin_name"],
                                           "data_class": r["data_class"], "steps": []})
            t["steps"].append(r["step"])
    return {"file": str(path), "num_records": len(read_records(path)), "counts": counts,
            "tags": tags, "problems": compat_problems(recs), "records": recs}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: tb_reader.py EVENTFILE   (prints a JSON summary)", file=sys.stderr)
        return 2
    try:
        report = summarize(argv[0])
    except ValueError as e:
        print(json.dumps({"file": argv[0], "error": str(e)}, indent=1))
        return 1
    print(json.dumps(report, indent=1, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
