"""The loop IR's CUDA vocabulary: the hardware axes, memory scopes and statements of an NVIDIA GPU kernel.

A cuda schedule (``compiler.ops.cuda``) builds its kernel from the loop IR's nodes and these names; the
NVPTX emitter (``compiler.backend.nvptx_emit``) says what each becomes in PTX. Sequentially (the reference
interpreter) a bound loop is a loop, and the statements below that only order threads do nothing.

- **Axes**: a loop is bound (``ForKind.THREAD_BINDING``) to one of ``BLOCK_AXES`` or ``THREAD_AXES``.
  Statements outside every ``threadIdx.x`` loop run in all ``WARP`` lanes of a warp.
- **Scopes**: ``shared`` (one buffer per block; static up to ``STATIC_SHARED_LIMIT`` bytes, dynamic above),
  ``global`` (the parameters), ``local`` (a thread's own), ``THREAD`` (one slice per thread: its first two
  axes are indexed by the variables bound to ``threadIdx.y`` and ``threadIdx.x``) and ``FRAGMENT`` (a warp's
  register fragments of a matrix instruction's operand: the first axis is the warp, the rest the warp's
  tiles of the operand's shape).
- **Statements** (``Attr`` nodes; the constructors below): a block-wide ``barrier``; an ``async_copy`` of 4,
  8 or 16 contiguous bytes from a global buffer to a shared one, ``async_commit`` closing the thread's
  group of copies and ``async_wait`` for groups; ``warpgroup_fence``, ``warpgroup_commit`` and
  ``warpgroup_wait`` ordering warpgroup matrix instructions; ``proxy_fence`` publishing shared writes to
  the asynchronous proxy those instructions read through.
- **Layout**: ``swizzle(allocate)`` lays a shared buffer ``[..., rows, cols]`` out as Hopper's 128-byte
  swizzle: its columns in panels of ``SWIZZLE_BYTES`` (each panel's rows consecutive), and in each row the
  ``CHUNK``-byte chunk ``c`` stored at ``c ^ (row % SWIZZLE_ROWS)`` (``swizzled_offset``). Loop IR, and the
  interpreter, see the logical layout.

Non-goals: lowering (the emitter's) and launch shapes (``compiler.backend.nvptx_launch``).
"""

from __future__ import annotations

from compiler.ir import nodes as n

#: The hardware axes a loop can be bound to.
BLOCK_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
#: The threads of a warp.
WARP = 32
#: The scope of a warp's register fragments, of a buffer with one slice per thread, and the statement
#: attribute of a block-wide barrier.
FRAGMENT = "fragment"
THREAD = "thread"
BARRIER = "barrier"
#: The statement attributes of an asynchronous copy, of closing a group of them and of waiting for groups.
ASYNC_COPY, ASYNC_COMMIT, ASYNC_WAIT = "async_copy", "async_commit", "async_wait"
#: The attributes ordering warpgroup instructions, of the async-proxy fence and of a swizzled layout.
WG_FENCE, WG_COMMIT, WG_WAIT = "warpgroup_fence", "warpgroup_commit", "warpgroup_wait"
PROXY_FENCE, SWIZZLE = "proxy_fence", "swizzle"
#: The swizzle span (bytes of a row of a swizzle atom), its rows, and the bytes of one chunk.
SWIZZLE_BYTES, SWIZZLE_ROWS, CHUNK = 128, 8, 16
SWIZZLE_ALIGN = SWIZZLE_BYTES * SWIZZLE_ROWS
#: A kernel's statically allocated shared memory may not exceed this (CUDA's limit per block); a kernel
#: that needs more gets it as dynamic shared memory.
STATIC_SHARED_LIMIT = 48 * 1024


def barrier() -> n.Stmt:
    """A block-wide barrier (``__syncthreads``): every thread of the block waits here for all the others;
    shared memory written before it is visible after it. Sequentially (the interpreter) it does nothing."""
    return n.Attr(BARRIER, "shared", n.Evaluate(n.const(0)))


def async_copy(copy: n.For) -> n.Stmt:
    """``copy`` (a vectorized loop storing 4, 8 or 16 contiguous bytes of a global buffer into a shared
    buffer) issued asynchronously: the thread goes on, and the bytes are in shared memory once an
    ``async_wait`` after the ``async_commit`` that closes its group has returned."""
    return n.Attr(ASYNC_COPY, "shared", copy)


def async_commit() -> n.Stmt:
    """Close this thread's group of asynchronous copies issued since the last commit (possibly none)."""
    return n.Attr(ASYNC_COMMIT, "shared", n.Evaluate(n.const(0)))


def async_wait(pending: int) -> n.Stmt:
    """Wait until at most ``pending`` of this thread's committed groups of copies are still in flight."""
    return n.Attr(ASYNC_WAIT, pending, n.Evaluate(n.const(0)))


def warpgroup_fence() -> n.Stmt:
    """``wgmma.fence``: before the first warpgroup instruction of a batch (and after anything else wrote
    its accumulators)."""
    return n.Attr(WG_FENCE, "warpgroup", n.Evaluate(n.const(0)))


def warpgroup_commit() -> n.Stmt:
    """Close the warpgroup's batch of matrix instructions issued since the last commit into a group."""
    return n.Attr(WG_COMMIT, "warpgroup", n.Evaluate(n.const(0)))


def warpgroup_wait(pending: int) -> n.Stmt:
    """Wait until at most ``pending`` of the warpgroup's groups of matrix instructions are in flight."""
    return n.Attr(WG_WAIT, pending, n.Evaluate(n.const(0)))


def proxy_fence() -> n.Stmt:
    """Make this thread's writes to shared memory visible to the asynchronous proxy (warpgroup matrix
    instructions read their shared operands through it); a barrier after it publishes all threads'."""
    return n.Attr(PROXY_FENCE, "shared", n.Evaluate(n.const(0)))


def swizzle(allocate: n.Allocate) -> n.Stmt:
    """``allocate`` (of a shared buffer) in the 128-byte swizzled layout (the module docstring)."""
    return n.Attr(SWIZZLE, SWIZZLE_BYTES, allocate)


def swizzled_offset(flat: int, shape: tuple[int, ...], elem_bytes: int) -> int:
    """The physical element offset of logical element ``flat`` of a swizzled buffer of ``shape``."""
    rows, cols = shape[-2], shape[-1]
    span, vec = SWIZZLE_BYTES // elem_bytes, CHUNK // elem_bytes
    lead, rest = divmod(flat, rows * cols)
    r, c = divmod(rest, cols)
    panel, cc = divmod(c, span)
    chunk, within = divmod(cc, vec)
    return lead * rows * cols + panel * rows * span + r * span + (chunk ^ (r % SWIZZLE_ROWS)) * vec + within
