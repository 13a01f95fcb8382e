"""The sequence-parallel collectives on the NVLink copy engines, overlapped with the products.

A sequence-parallel decoder layer (``nmspmm.parallelize_(..., sequence_parallel=True)``) moves
its activations by an all-gather before the column-parallel projections and a reduce-scatter
after the row-parallel ones. NCCL runs them as kernels on the SMs, which the products fill: on
two H200s they move 8 MiB per rank in 51-56 us each and do not overlap the products. Here every
rank writes straight into its peers' memory with the copy engines (``Tensor.copy_`` into a
``torch.distributed._symmetric_memory`` buffer: 8 MiB in 24 us, no SM), ordered by the symmetric
memory's device barriers (3 us):

* ``all_gather``: this rank's slice pushed into every peer's buffer.
* ``reduce_scatter`` of a row-parallel product: the partial products of the peers' tokens are
  computed first, each pushed while the next (last: this rank's own) is computed; then the
  received partials are added.

Every exchange ends with a barrier on the side stream that made its pushes (all ranks' pushes
have landed), joined back into the current stream, so it is stream-ordered and CUDA-graph
capturable. The all-gathers use one region of the buffer and the reduce-scatters the other; a
rank pushes into a region only after the barrier of an exchange that began after its peers had
consumed that region, so an exchange starts with a barrier only where it follows one on the same
region (the first of a forward). The buffer is allocated collectively, outside graph capture
(warm up before capturing). :func:`peer_exchange` says where all of this applies.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, Optional

import torch

_EXCHANGES: Dict[tuple, "PeerExchange"] = {}
_UNAVAILABLE: Dict[tuple, str] = {}


class PeerExchange:
    """Slots in one symmetric-memory buffer: region G holds the gathered slices (slot p: rank p's
    tokens), region Z the partial sums pushed by each peer (slot p: from rank p)."""

    def __init__(self, group, device: torch.device):
        import torch.distributed as dist

        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.device = device
        self.side = torch.cuda.Stream(device)
        self.buffer: Optional[torch.Tensor] = None
        self.handle = None
        self.region_bytes = 0
        self.last_region: Optional[int] = None
        self._views: Dict[tuple, torch.Tensor] = {}

    def reserve(self, slot_bytes: int) -> None:
        """A buffer whose regions hold W slots of ``slot_bytes`` (collective: every rank calls it
        at the same point; it allocates on first use and growth only)."""
        need = self.world * slot_bytes
        if need <= self.region_bytes:
            return
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"nmspmm: the peer-copy buffer needs {2 * need} bytes, has {2 * self.region_bytes}; "
                               f"run the model once with this shape before capturing a CUDA graph")
        import torch.distributed._symmetric_memory as symm_mem

        region = (need + 255) // 256 * 256
        self.buffer = symm_mem.empty(2 * region, dtype=torch.uint8, device=self.device)
        self.handle = symm_mem.rendezvous(self.buffer, self.group.group_name)
        self.region_bytes = region
        self.last_region = None
        self._views.clear()

    def _view(self, owner: int, shape: tuple, dtype: torch.dtype, offset_bytes: int) -> torch.Tensor:
        """Rank ``owner``'s buffer from ``offset_bytes`` as a tensor of ``shape``, made once per key."""
        key = (owner, shape, dtype, offset_bytes)
        view = self._views.get(key)
        if view is None:
            with torch.inference_mode(False):  # a normal tensor: writable under no_grad and inference_mode alike
                view = self.handle.get_buffer(owner, shape, dtype, offset_bytes // dtype.itemsize)
            self._views[key] = view
        return view

    def _slot(self, owner: int, region: int, slot: int, like: torch.Tensor) -> torch.Tensor:
        """Slot ``slot`` of region ``region`` (0: G, 1: Z) in rank ``owner``'s buffer, shaped like ``like``."""
        return self._view(owner, tuple(like.shape), like.dtype, region * self.region_bytes + slot * _nbytes(like))

    def _begin(self, region: int) -> None:
        """An exchange on ``region`` (0: gathered slices, 1: partial sums) begins: a barrier
        where the previous exchange used the same region (a peer may still be reading it)."""
        if self.last_region in (None, region):
            self.handle.barrier(channel=0)
        self.last_region = region

    def _peers(self):
        return [(self.rank + step) % self.world for step in range(1, self.world)]

    def _push(self, region: int, src: torch.Tensor) -> None:
        """On the side stream, after the current stream's work so far: ``src`` into this rank's
        slot of ``region`` in every peer, then a barrier (all pushes of all ranks landed)."""
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            for p in self._peers():
                self._slot(p, region, self.rank, src).copy_(src)
            self.handle.barrier(channel=1)

    def all_gather(self, x: torch.Tensor, view: bool = False) -> torch.Tensor:
        """[B, t, ...] slices in rank order -> [B, W*t, ...], a new tensor; with ``view`` and B = 1
        a view of the buffer instead, valid until the next exchange on this group (for a consumer
        that reads it at once, such as the attention's projections)."""
        x = x.contiguous()
        self.reserve(_nbytes(x))
        self._begin(0)
        self._push(0, x)
        self._slot(self.rank, 0, self.rank, x).copy_(x)
        torch.cuda.current_stream().wait_stream(self.side)
        gathered = self._region(0, x).transpose(0, 1)  # [B, W, t, ...]: a view of the buffer
        shape = (x.shape[0], self.world * x.shape[1]) + tuple(x.shape[2:])
        return gathered.reshape(shape) if view else gathered.contiguous().view(shape)

    def _region(self, region: int, like: torch.Tensor) -> torch.Tensor:
        """This rank's region as [W, *like.shape]."""
        return self._view(self.rank, (self.world,) + tuple(like.shape), like.dtype, region * self.region_bytes)

    def _sum_received(self, own: torch.Tensor) -> torch.Tensor:
        """``own`` (a fresh partial) plus the partials the peers pushed into region Z."""
        for p in self._peers():
            own += self._slot(self.rank, 1, p, own)
        return own

    def reduce_scatter(self, produce: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                       out_bytes: int) -> torch.Tensor:
        """``produce`` (a token-wise partial product, [B, t, ...] -> [B, t, out]) applied to
        ``x`` [B, W*t, ...] and summed over the ranks, keeping this rank's tokens [B, t, out].
        The peers' tokens go first, each pushed while the next is computed. ``out_bytes``: the
        bytes of one [B, t, out] result."""
        self.reserve(out_bytes)
        t = x.shape[1] // self.world
        main = torch.cuda.current_stream()
        self._begin(1)
        partials = []
        for p in self._peers():
            z = self._fits(produce(x[:, p * t:(p + 1) * t]))
            self.side.wait_stream(main)
            with torch.cuda.stream(self.side):
                self._slot(p, 1, self.rank, z).copy_(z)
            partials.append(z)  # alive until the side stream is joined
        own = produce(x[:, self.rank * t:(self.rank + 1) * t])
        with torch.cuda.stream(self.side):
            self.handle.barrier(channel=1)
        main.wait_stream(self.side)
        return self._sum_received(own)

    def _fits(self, z: torch.Tensor) -> torch.Tensor:
        """A partial sum must fit the slots reserved before the exchange began (growing the
        buffer there would be a collective in the middle of one); every rank fails alike."""
        if self.world * _nbytes(z) > self.region_bytes or not z.is_contiguous():
            raise RuntimeError(f"nmspmm: a partial sum of shape {tuple(z.shape)} ({z.dtype}) does not fit the "
                               f"peer-copy slots of {self.region_bytes // self.world} bytes (or is not contiguous)")
        return z


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _mode() -> str:
    """``NMSPMM_PEER_COPIES``: ``graph`` (default) uses the copy-engine collectives while a CUDA
    graph is captured, ``1`` always, ``0`` never (NCCL everywhere). Eager prefill waits on the
    host's launches, which the exchanges add to; a graph replays without them."""
    return os.environ.get("NMSPMM_PEER_COPIES", "graph")


def peer_exchange(group, x: torch.Tensor, slot_bytes: int) -> Optional[PeerExchange]:
    """The exchange of ``group`` for ``x``'s device with slots of ``slot_bytes`` reserved, when
    it is to be used; else None (the NCCL collectives). It does not apply to: tensors not on a
    GPU, a trace by ``torch.compile`` (its functional collectives), recorded gradients, a group
    whose backend is not NCCL, GPUs without symmetric memory between them. Where it applies, the
    buffer is reserved on every call outside a CUDA graph capture (a collective, the same on
    every rank), so the eager warm-up before a capture sizes it."""
    mode = _mode()
    if mode == "0" or not x.is_cuda or torch.compiler.is_compiling() or torch.is_grad_enabled():
        return None
    import torch.distributed as dist

    key = (id(group), x.device.index)
    ex = _EXCHANGES.get(key)
    capturing = torch.cuda.is_current_stream_capturing()
    if ex is None:
        if key in _UNAVAILABLE or capturing:  # the rendezvous cannot run in a capture: NCCL there
            return None
        try:
            if dist.get_backend(group) != "nccl":
                raise RuntimeError(f"backend {dist.get_backend(group)}")
            ex = PeerExchange(group, x.device)
            ex.reserve(slot_bytes)  # the first rendezvous: a failure here is the same on every rank
        except Exception as err:  # noqa: BLE001 - any reason means: use NCCL
            _UNAVAILABLE[key] = repr(err)
            return None
        _EXCHANGES[key] = ex
    if not capturing:
        ex.reserve(slot_bytes)
    return ex if mode == "1" or capturing else None
