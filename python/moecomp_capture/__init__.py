"""moecomp_capture: each MoE block's input on calibration tokens, written as the `calibration.safetensors` that
`moecomp compress --calibration` reads (`layers.{i}.moe_input`, T x hidden). docs/capture.md.

    import moecomp_capture as mc
    tensors = mc.capture(model, batches)               # {"layers.0.moe_input": T x hidden float32, ...}
    mc.write_calibration("calibration.safetensors", tensors)

`capture` finds the MoE blocks of a torch model by class name and module path (FAMILIES: Mixtral, Qwen2-MoE,
DeepSeek-V2/V3, OLMoE, Switch Transformers; and with family="mistral" the dense FFNs of Mistral/Llama/Qwen2 that
`--method moefy` splits), registers a forward pre-hook on each, runs the batches under torch.no_grad() and
concatenates each block's input rows in order. The embedded model of this repository (models/tiny_moe.py, a
functional forward over a weights dict) is captured through its forward's `moe_inputs=` list: load it with
load_embedded(). Pure Python over torch; transformers is not needed (classes are matched by name).
"""
import importlib.util
import inspect
import os
import re
from collections import namedtuple
from collections.abc import Mapping

import torch

from .safetensors_io import DTYPES, dtype_name, read_calibration, write_calibration

__all__ = ["Family", "FAMILIES", "Block", "EmbeddedModel", "capture", "find_moe_blocks", "load_embedded",
           "windows", "calibration_key", "set_blas_threads", "write_calibration", "read_calibration", "DTYPES"]

Family = namedtuple("Family", "name classes pattern stacks moe description")
Family.__doc__ = """One row of the family table.
name: the layout's name (layouts/<name>.json of moecomp); classes: the block's class names in transformers (or a
model's remote code); pattern: a regular expression on the module's qualified name (named_modules), searched at
its end, with group `layer` (the layer's index within its stack) and, for several stacks, group `stack`; stacks:
the stacks in the layout's order (the first one holding a block gets no key prefix); moe: False for dense FFNs."""

_LAYER = r"(?:^|\.)layers\.(?P<layer>\d+)\."

FAMILIES = (
    Family("mixtral", ("MixtralSparseMoeBlock",), _LAYER + r"(?:block_sparse_moe|mlp)$", ("decoder",), True,
           "Mixtral: model.layers.{i}.block_sparse_moe (model.layers.{i}.mlp in transformers 5)"),
    Family("qwen2_moe", ("Qwen2MoeSparseMoeBlock",), _LAYER + r"mlp$", ("decoder",), True,
           "Qwen2-MoE / Qwen1.5-MoE: model.layers.{i}.mlp where it is sparse (not mlp_only_layers, every "
           "decoder_sparse_step)"),
    Family("deepseek", ("DeepseekV2MoE", "DeepseekV3MoE"), _LAYER + r"mlp$", ("decoder",), True,
           "DeepSeek-V2/V3: model.layers.{i}.mlp from first_k_dense_replace on (the dense layers before it are "
           "DeepseekV2MLP/DeepseekV3MLP, not captured)"),
    Family("olmoe", ("OlmoeSparseMoeBlock",), _LAYER + r"mlp$", ("decoder",), True,
           "OLMoE: model.layers.{i}.mlp"),
    Family("switch_transformers", ("SwitchTransformersSparseMLP",),
           r"(?:^|\.)(?P<stack>encoder|decoder)\.block\.(?P<layer>\d+)\.layer\.\d+\.mlp$", ("encoder", "decoder"),
           True, "Switch Transformers: encoder.block.{i}.layer.1.mlp and decoder.block.{i}.layer.2.mlp where sparse "
           "(the dense ones are SwitchTransformersDenseActDense)"),
    Family("mistral", ("MistralMLP", "LlamaMLP", "Qwen2MLP"), _LAYER + r"mlp$", ("decoder",), False,
           "dense SwiGLU FFNs (Mistral, Llama, Qwen2), what --method moefy splits: model.layers.{i}.mlp; "
           "only with family='mistral'"),
)

# The embedded model (models/tiny_moe.py) is functional: no modules to hook; its forward's `moe_inputs=` list.
EMBEDDED_FAMILY = "tiny_moe"
_FAMILY_NAMES = tuple(f.name for f in FAMILIES) + (EMBEDDED_FAMILY,)

Block = namedtuple("Block", "key name module family stack layer")
Block.__doc__ = """A block to capture: its calibration key, qualified module name, the module, its family's name,
its stack and layer index."""


def calibration_key(stack, layer, first_stack):
    """The tensor name `moecomp compress` reads for a layer (tools/cli/command_compress.cpp):
    (stack == first_stack ? "" : stack + ".") + "layers." + layer + ".moe_input"."""
    return ("" if stack == first_stack else stack + ".") + f"layers.{int(layer)}.moe_input"


def _family(family):
    if not isinstance(family, str) or (family != "auto" and family not in _FAMILY_NAMES):
        raise ValueError(f"family: expected 'auto' or one of {', '.join(repr(n) for n in _FAMILY_NAMES)}, "
                         f"got {family!r}")
    return family


def find_moe_blocks(model, family="auto"):
    """The blocks of `model` (a torch.nn.Module) to capture, ordered by stack (the layout's order) and layer.

    family="auto" considers the MoE families and takes the one whose blocks are found (two families at once is an
    error: name one); a family name considers that family only ("mistral" for dense FFNs). ValueError when nothing
    is found, when a block's class matches but its path does not (its layer index is then unknown), or when two
    blocks get one key."""
    family = _family(family)
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model: expected a torch.nn.Module (or an EmbeddedModel from load_embedded), got "
                         f"{type(model).__name__}")
    if family == EMBEDDED_FAMILY:
        raise ValueError("family: 'tiny_moe' is the embedded functional model; pass an EmbeddedModel from "
                         f"load_embedded(), got a {type(model).__name__}")
    candidates = [f for f in FAMILIES if (f.moe if family == "auto" else f.name == family)]
    found = {}
    for name, module in model.named_modules():
        cls = type(module).__name__
        for f in candidates:
            if cls not in f.classes:
                continue
            m = re.search(f.pattern, name)
            if m is None:
                raise ValueError(f"model: module '{name}' is a {cls} ({f.name}), but its path does not end as "
                                 f"{f.name}'s blocks do (pattern {f.pattern!r}), so its layer index is unknown")
            stack = m.groupdict().get("stack") or f.stacks[0]
            found.setdefault(f.name, []).append((f.stacks.index(stack), int(m.group("layer")), stack, name, module))
    if not found:
        wanted = ", ".join(f"{c} ({f.name})" for f in candidates for c in f.classes)
        hint = "" if family != "auto" else ("; for a dense model's FFN inputs (moefy) pass family='mistral', for "
                                            "another architecture hook its blocks yourself")
        raise ValueError(f"model: no MoE block found in a {type(model).__name__}: expected modules of class "
                         f"{wanted} (family={family!r}){hint}")
    if len(found) > 1:
        raise ValueError(f"family: the model holds blocks of several families ({', '.join(sorted(found))}); "
                         "pass family= to choose one")
    (name_of_family, rows), = found.items()
    f = next(f for f in FAMILIES if f.name == name_of_family)
    rows.sort(key=lambda r: (r[0], r[1]))
    first = rows[0][2]
    blocks, keys = [], {}
    for _, layer, stack, name, module in rows:
        key = calibration_key(stack, layer, first)
        if key in keys:
            raise ValueError(f"model: modules '{keys[key]}' and '{name}' both map to calibration key '{key}'")
        keys[key] = name
        blocks.append(Block(key, name, module, f.name, stack, layer))
    return blocks


# ------------------------------------------------------------------------------------------------ batches

def windows(ids, seq_len, batch_size=1):
    """Batches of token ids from one sequence: consecutive non-overlapping windows of `seq_len` ids, `batch_size`
    windows to a batch (B x seq_len int64 tensors), in order; a final shorter window is a batch of its own, so no
    token is dropped. `ids`: a 1-D sequence of ints, bytes, or a 1-D tensor."""
    for argument, value in (("seq_len", seq_len), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{argument}: expected an integer >= 1, got {value!r}")
    t = ids if isinstance(ids, torch.Tensor) else torch.tensor(list(ids), dtype=torch.long)
    if t.dim() != 1:
        raise ValueError(f"ids: expected a 1-D sequence of token ids, got shape {list(t.shape)}")
    t = t.to(torch.long)
    full = t.shape[0] // seq_len
    body = t[:full * seq_len].view(full, seq_len)
    for i in range(0, full, batch_size):
        yield body[i:i + batch_size]
    if t.shape[0] > full * seq_len:
        yield t[full * seq_len:].view(1, -1)


def _run(model, batch, forward):
    if forward is not None:
        return forward(model, batch)
    if isinstance(batch, torch.Tensor):
        return model(batch)
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    raise ValueError(f"batches: each batch must be a tensor of token ids, a dict of keyword arguments or a "
                     f"tuple of positional arguments (or pass forward=), got {type(batch).__name__}")


def _mask_of(batch, stack, family):
    """The batch's attention mask for a stack's tokens, or None."""
    if not isinstance(batch, Mapping):
        return None
    name = "decoder_attention_mask" if (family == "switch_transformers" and stack == "decoder") else "attention_mask"
    mask = batch.get(name)
    return None if mask is None else torch.as_tensor(mask)


def _rows(x, mask, where):
    """x's tokens as rows (N x hidden), without the positions the mask zeroes."""
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(f"model: the input of '{where}' is not a tensor of at least 2 dimensions (tokens x hidden), "
                         f"got {type(x).__name__}{'' if not isinstance(x, torch.Tensor) else ' ' + str(list(x.shape))}")
    if mask is not None:
        m = mask.to(device=x.device).bool()
        if tuple(x.shape[:-1]) == tuple(m.shape):
            return x[m]
        if x.dim() == 2 and x.shape[0] == m.numel():
            return x[m.reshape(-1)]
        raise ValueError(f"batches: the attention mask's shape {list(m.shape)} does not match the tokens of "
                         f"'{where}' ({list(x.shape[:-1])})")
    return x.reshape(-1, x.shape[-1])


def _check_common(batches, max_tokens, dtype):
    torch_dtype = DTYPES[dtype_name(dtype)][1]
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"max_tokens: expected None or an integer >= 1, got {max_tokens!r}")
    if batches is None or isinstance(batches, (str, bytes)) or not hasattr(batches, "__iter__"):
        raise ValueError(f"batches: expected an iterable of batches, got {type(batches).__name__}")
    return torch_dtype


def _no_batches():
    return ValueError("batches: expected at least one batch, got none (an empty iterable)")


# ------------------------------------------------------------------------------------------------ capture

def capture(model, batches, *, family="auto", max_tokens=None, dtype="float32", forward=None, modules=None):
    """{calibration key: T x hidden tensor} of each MoE block's input on `batches`.

    model: a torch.nn.Module whose blocks FAMILIES names (found by find_moe_blocks), or the EmbeddedModel of
        load_embedded().
    batches: an iterable of batches, each a LongTensor of token ids (B x S, passed as model(ids)), a dict of keyword
        arguments (model(**batch): input_ids, attention_mask, ...) or a tuple (model(*batch)). Move them to the
        model's device yourself. Positions where the dict's `attention_mask` is 0 (padding) are left out
        (`decoder_attention_mask` for Switch's decoder blocks).
    family: "auto" or a FAMILIES name ("mistral" for dense FFNs), or "tiny_moe" for the embedded model.
    max_tokens: at most this many rows per key (the first ones); batches are run until every block has them.
    dtype: of the returned tensors, "float32" (default), "bfloat16", "float16" or "float64" (rows are copied to
        the CPU in this dtype as they come: a bf16 model's inputs are exact in float32).
    forward: optional callable (model, batch) that runs one batch, instead of the rules above.
    modules: optional {key: module} to hook instead of the family table (any architecture).
    Rows are each block's input flattened over batch and sequence (batch-major), batches in order. The model runs
    under torch.no_grad() in eval mode (its training flag is restored after); the hooks are removed even on error.
    ValueError (naming the argument, expected and actual) for: an unknown family, no block found, no batch, a bad
    dtype or max_tokens, a batch of another kind, a block never called.
    """
    torch_dtype = _check_common(batches, max_tokens, dtype)
    family = _family(family)
    if isinstance(model, EmbeddedModel):
        if family not in ("auto", EMBEDDED_FAMILY):
            raise ValueError(f"family: the embedded model is captured as 'auto' or 'tiny_moe', got {family!r}")
        return _capture_embedded(model, batches, max_tokens, torch_dtype)
    if modules is not None:
        if not isinstance(modules, Mapping) or not modules or not all(
                isinstance(k, str) and isinstance(v, torch.nn.Module) for k, v in modules.items()):
            raise ValueError(f"modules: expected a non-empty dict of calibration key -> torch.nn.Module, got {modules!r}")
        names = {id(m): n for n, m in model.named_modules()} if isinstance(model, torch.nn.Module) else {}
        blocks = [Block(k, names.get(id(m), k), m, "custom", "decoder", i) for i, (k, m) in enumerate(modules.items())]
    else:
        blocks = find_moe_blocks(model, family)
    state = {"batch": None}
    rows = {b.key: [] for b in blocks}
    counts = {b.key: 0 for b in blocks}
    kwargs_hooks = "with_kwargs" in inspect.signature(torch.nn.Module.register_forward_pre_hook).parameters

    def make_hook(block):
        def take(x):
            if max_tokens is not None and counts[block.key] >= max_tokens:
                return
            r = _rows(x.detach(), _mask_of(state["batch"], block.stack, block.family), block.name)
            if max_tokens is not None:
                r = r[:max_tokens - counts[block.key]]
            rows[block.key].append(r.to(device="cpu", dtype=torch_dtype, copy=True))
            counts[block.key] += r.shape[0]

        def hook(module, args, kwargs=None):
            if args:
                take(args[0])
            elif kwargs:
                x = kwargs.get("hidden_states")
                if x is None:
                    x = next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)
                take(x)
            else:
                raise ValueError(f"model: '{block.name}' was called without positional arguments; torch "
                                 f"{torch.__version__} passes keyword arguments to no pre-hook (torch >= 2.0 does)")
        return hook

    handles = []
    training = model.training if isinstance(model, torch.nn.Module) else None
    try:
        for b in blocks:
            if kwargs_hooks:
                handles.append(b.module.register_forward_pre_hook(make_hook(b), with_kwargs=True))
            else:
                handles.append(b.module.register_forward_pre_hook(make_hook(b)))
        if training is not None:
            model.eval()
        ran = 0
        with torch.no_grad():
            for batch in batches:
                state["batch"] = batch
                _run(model, batch, forward)
                ran += 1
                if max_tokens is not None and all(c >= max_tokens for c in counts.values()):
                    break
    finally:
        for h in handles:
            h.remove()
        state["batch"] = None
        if training:
            model.train()
    if ran == 0:
        raise _no_batches()
    for b in blocks:
        if counts[b.key] == 0:
            raise ValueError(f"model: the block '{b.name}' ({b.key}) saw no tokens in {ran} batch(es); was it "
                             "called by the model's forward?")
    return {b.key: torch.cat(rows[b.key]) for b in blocks}


# ------------------------------------------------------------------------------------------- embedded model

_REPO_MODELS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))


class EmbeddedModel:
    """The repository's functional model (models/tiny_moe.py): float32 weights, config, and the module whose
    forward(w, config, ids, moe_inputs=list) appends each layer's MoE-block input (its FFN input for the dense
    twin, models/tiny-dense) as a (B*S) x hidden tensor."""

    def __init__(self, weights, config, tiny_moe, model_dir=None):
        self.weights, self.config, self.tiny_moe, self.model_dir = weights, config, tiny_moe, model_dir

    @property
    def is_moe(self):
        return "num_local_experts" in self.config

    def __call__(self, ids, moe_inputs=None):
        return self.tiny_moe.forward(self.weights, self.config, ids, moe_inputs=moe_inputs)

    def __repr__(self):
        return f"EmbeddedModel({self.model_dir!r}, {'MoE' if self.is_moe else 'dense'})"


def _load_tiny_moe(path):
    spec = importlib.util.spec_from_file_location("moecomp_capture._tiny_moe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_embedded(model_dir=None, tiny_moe=None):
    """The embedded model of `model_dir` (default: the repository's models/tiny-moe; models/tiny-dense is its dense
    twin): config.json and model.safetensors (or a sharded index), read by tiny_moe.load as float32. `tiny_moe`:
    the path of tiny_moe.py (default $MOECOMP_TINY_MOE, else the repository's models/tiny_moe.py)."""
    model_dir = os.path.join(_REPO_MODELS, "tiny-moe") if model_dir is None else os.fspath(model_dir)
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise ValueError(f"model_dir: expected a directory with config.json and model.safetensors, got '{model_dir}'")
    path = tiny_moe or os.environ.get("MOECOMP_TINY_MOE") or os.path.join(_REPO_MODELS, "tiny_moe.py")
    if not os.path.isfile(path):
        raise ValueError(f"tiny_moe: expected the path of models/tiny_moe.py, got '{path}' (no such file)")
    module = _load_tiny_moe(path)
    weights, config = module.load(model_dir)
    return EmbeddedModel(weights, config, module, model_dir)


def _capture_embedded(model, batches, max_tokens, torch_dtype):
    layers = model.config["num_hidden_layers"]
    rows = [[] for _ in range(layers)]
    count, ran = 0, 0
    with torch.no_grad():
        for batch in batches:
            mask = None
            if isinstance(batch, Mapping):
                ids, mask = batch.get("input_ids"), batch.get("attention_mask")
            else:
                ids = batch
            if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
                raise ValueError("batches: each batch of the embedded model must be a B x S tensor of byte ids (or a "
                                 "dict with input_ids and attention_mask), got "
                                 f"{type(ids).__name__}{' ' + str(list(ids.shape)) if isinstance(ids, torch.Tensor) else ''}")
            inputs = []
            model(ids, moe_inputs=inputs)
            ran += 1
            if len(inputs) != layers:
                raise ValueError(f"model: the embedded forward gave {len(inputs)} layer inputs, expected {layers}")
            take = None
            for i, x in enumerate(inputs):
                r = _rows(x, None if mask is None else torch.as_tensor(mask), f"layer {i}")
                if max_tokens is not None:
                    r = r[:max_tokens - count]
                rows[i].append(r.to(dtype=torch_dtype, copy=True))
                take = r.shape[0]
            count += take
            if max_tokens is not None and count >= max_tokens:
                break
    if ran == 0:
        raise _no_batches()
    if count == 0:
        raise ValueError(f"batches: {ran} batch(es) held no token")
    return {calibration_key("decoder", i, "decoder"): torch.cat(rows[i]) for i in range(layers)}


def set_blas_threads(threads):
    """Sets torch's intra-op threads and, where torch's BLAS is OpenBLAS (Debian's torch), OpenBLAS's own thread
    count, which torch.set_num_threads leaves alone and which changes float32 GEMM sums (OMP_NUM_THREADS or
    OPENBLAS_NUM_THREADS set before torch loads does the same). Returns the OpenBLAS library's path, or None."""
    import ctypes
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads: expected an integer >= 1, got {threads!r}")
    torch.set_num_threads(threads)
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    for path in paths:
        try:
            library = ctypes.CDLL(path)
            library.openblas_set_num_threads(ctypes.c_int(threads))
            return path
        except (OSError, AttributeError):
            continue
    return None
