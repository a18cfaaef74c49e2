# weft's gdb extension: the fibers of a weft program, live or in a core file.
#
#   (gdb) source /usr/local/share/weft/gdb/weft.py     (wherever weft is installed)
#   (gdb) info weft-fibers                 every started fiber: id, carrier, state, wait, what started it
#   (gdb) weft-bt 17                       the backtrace of parked fiber 17, through gdb's own unwinder
#
# It reads the process's memory only, through the table weft exports as
# weft__debug_layout (src/fiber/debug.c): addresses and field offsets, so it
# needs no debug information of weft's (the program's own, if any, names its
# frames). weft-bt decodes the frame weft__ctx_switch saved on the fiber's
# stack (the tables at the top of context_x86_64.S and context_aarch64.S),
# puts those registers into the selected thread, runs `bt`, and puts the
# thread's own registers back. On a core file gdb cannot write registers;
# there weft-bt shows `frame view` of the fiber's resume point and walks the
# frame-pointer chain, which names every frame of code built with frame
# pointers (and weft's own assembly) and may stop early in code without.
#
# docs/debugging.md has a worked session.

import struct

import gdb
import gdb.unwinder

MAGIC = 0x74666577
KNOWN_VERSION = 1
STATES = {0: "queued", 1: "runnable", 2: "running", 3: "parked"}

# Offsets of the saved registers in weft__ctx_switch's frame, from the saved
# stack pointer, and how far above it the resumed stack pointer is.
FRAMES = {
    "x86-64": {"pc": 0x38, "fp": 0x30, "sp_after": 0x40,
               "regs": {"rbx": 0x28, "r12": 0x08, "r13": 0x10, "r14": 0x18, "r15": 0x20},
               "names": {"pc": "rip", "sp": "rsp", "fp": "rbp"}},
    "aarch64": {"pc": 0x98, "fp": 0x90, "sp_after": 0xb0,
                "regs": dict(("x%d" % (19 + i), 0x40 + 8 * i) for i in range(10)),
                "names": {"pc": "pc", "sp": "sp", "fp": "x29"}},
}


def _arch():
    name = gdb.selected_inferior().architecture().name()
    if "x86-64" in name or "x86_64" in name or "i386:x86-64" in name:
        return "x86-64"
    if "aarch64" in name:
        return "aarch64"
    raise gdb.GdbError("weft: no frame layout for architecture %s" % name)


def _mem(addr, n):
    return bytes(gdb.selected_inferior().read_memory(addr, n))


def _u(addr, size):
    return int.from_bytes(_mem(addr, size), "little")


def _cstr(addr, limit=256):
    if not addr:
        return None
    b = _mem(addr, limit)
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


class Layout:
    NAMES = ["magic", "version", "rt", "rt_carriers", "rt_ncarriers", "c_id", "c_reg_head", "c_status",
             "c_extra", "f_reg_next", "f_id", "f_state", "f_wait_kind", "f_wait_obj", "f_wait_deadline",
             "f_wait_since", "f_sp", "f_flags", "f_tag", "f_ops", "ops_what", "f_arg", "f_spawn_site",
             "wait_names", "nwait", "rt_state", "coarse_now", "flag_clone", "ptr"]

    def __init__(self):
        try:
            addr = int(gdb.parse_and_eval("(unsigned long)&weft__debug_layout"))
        except gdb.error:
            raise gdb.GdbError("weft: no weft__debug_layout in this program (not linked with weft 0.1+, "
                               "or its symbols are gone)")
        raw = _mem(addr, 8 * len(self.NAMES))
        for i, n in enumerate(self.NAMES):
            setattr(self, n, struct.unpack_from("<Q", raw, 8 * i)[0])
        if self.magic != MAGIC:
            raise gdb.GdbError("weft: weft__debug_layout has a wrong magic number")
        if self.version != KNOWN_VERSION:
            raise gdb.GdbError("weft: weft__debug_layout version %d; this script knows %d"
                               % (self.version, KNOWN_VERSION))
        self.wait = []
        for k in range(self.nwait):
            self.wait.append(_cstr(_u(self.wait_names + k * self.ptr, self.ptr)) or "?")


def _carriers(lay):
    base = _u(lay.rt + lay.rt_carriers, lay.ptr)
    n = _u(lay.rt + lay.rt_ncarriers, 4)
    if not base:
        return []
    return [_u(base + i * lay.ptr, lay.ptr) for i in range(n)]


def _fibers(lay):
    """(carrier id, extra, fiber address) for every started fiber on every carrier's list."""
    for c in _carriers(lay):
        if not c:
            continue
        cid = _u(c + lay.c_id, 4)
        extra = _u(c + lay.c_extra, 1)
        f = _u(c + lay.c_reg_head, lay.ptr)
        seen = 0
        while f and seen < 10000000:
            yield cid, extra, f
            f = _u(f + lay.f_reg_next, lay.ptr)
            seen += 1


def _symbol(addr):
    if not addr:
        return "?"
    try:
        b = gdb.block_for_pc(addr)
        while b and not b.function:
            b = b.superblock
        if b and b.function:
            return "%s" % b.function.print_name
    except RuntimeError:
        pass
    s = gdb.execute("info symbol %#x" % addr, to_string=True).strip()
    return s.split(" in section")[0] if s and not s.startswith("No symbol") else "%#x" % addr


class InfoWeftFibers(gdb.Command):
    """List weft's started fibers: id, carrier, state, what a parked one waits for, what started it.
Usage: info weft-fibers"""

    def __init__(self):
        super().__init__("info weft-fibers", gdb.COMMAND_STATUS)

    def invoke(self, arg, from_tty):
        lay = Layout()
        running = _u(lay.rt + lay.rt_state, 4) == 1
        if not running:
            print("weft: the fiber runtime is not running")
            return
        now = _u(lay.coarse_now, 8)
        n = 0
        print("%-10s %-8s %-9s %-30s %s" % ("fiber", "carrier", "state", "waits for", "started by"))
        for cid, extra, f in _fibers(lay):
            fid = _u(f + lay.f_id, 8)
            st = STATES.get(_u(f + lay.f_state, 1), "?")
            wait = ""
            if st == "parked":
                k = _u(f + lay.f_wait_kind, 1)
                obj = _u(f + lay.f_wait_obj, lay.ptr)
                name = lay.wait[k] if k < len(lay.wait) else "?"
                if name in ("read", "write"):
                    wait = "%s fd %d" % (name, obj)
                elif name == "sleep" or not obj:
                    wait = name
                else:
                    wait = "%s %#x" % (name, obj)
                since = _u(f + lay.f_wait_since, 8)
                if since and now >= since:
                    wait += " for %.1f ms" % ((now - since) / 1e6)
            ops = _u(f + lay.f_ops, lay.ptr)
            what = _cstr(_u(ops + lay.ops_what, lay.ptr)) if ops else None
            flags = _u(f + lay.f_flags, 4)
            site = _symbol(_u(f + lay.f_spawn_site, lay.ptr))
            if flags & lay.flag_clone:
                by = "%s %d (map at %s)" % (what or "fiber", _u(f + lay.f_tag, 8), site)
            else:
                by = "%s %#x (at %s)" % (what or "fiber", _u(f + lay.f_arg, lay.ptr), site)
            print("%-10d %-8s %-9s %-30s %s" % (fid, "%d%s" % (cid, "x" if extra else ""), st, wait, by))
            n += 1
        print("%d fibers" % n)


def _find(lay, fid):
    for cid, extra, f in _fibers(lay):
        if _u(f + lay.f_id, 8) == fid:
            return f, _u(f + lay.f_state, 1)
    raise gdb.GdbError("weft: no started fiber %d (info weft-fibers lists them)" % fid)


class _FrameId:
    """A frame id for create_unwind_info (gdb.unwinder.FrameId exists only from gdb 14)."""

    def __init__(self, sp, pc):
        self.sp = sp
        self.pc = pc


class _FiberUnwinder(gdb.unwinder.Unwinder):
    """While weft-bt runs: the caller of the selected thread's innermost frame is the fiber's resume point.

    gdb's own unwinders (DWARF call-frame information) then walk on from the
    registers the fiber saved, the same on a live process and on a core file,
    where the thread's registers cannot be written."""

    def __init__(self):
        super().__init__("weft-fiber")
        self.regs = None  # {register name: value} of the fiber's resume point, while weft-bt runs

    def __call__(self, pending_frame):
        if self.regs is None:
            return None
        level = pending_frame.level() if hasattr(pending_frame, "level") else None
        if level is not None and level != 0:
            return None
        names = FRAMES[_arch()]["names"]
        sp = pending_frame.read_register(names["sp"])
        pc = pending_frame.read_register(names["pc"])
        if level is None and (int(sp), int(pc)) != self.innermost:
            return None
        # The frame's id says its stack is just below the fiber's: gdb refuses a caller whose stack is
        # "inner" (below) its callee's, and the fiber's stack is elsewhere than the thread's.
        fake_sp = gdb.Value(self.regs[names["sp"]] - 0x100).cast(sp.type)
        info = pending_frame.create_unwind_info(_FrameId(fake_sp, pc))
        ptr = gdb.lookup_type("void").pointer()
        for name, value in self.regs.items():
            info.add_saved_register(name, gdb.Value(value).cast(ptr))
        return info


_unwinder = _FiberUnwinder()
gdb.unwinder.register_unwinder(None, _unwinder, replace=True)


class WeftBt(gdb.Command):
    """Backtrace of a parked weft fiber, from the registers it saved when it switched away.
Usage: weft-bt FIBER-ID [COUNT]"""

    def __init__(self):
        super().__init__("weft-bt", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        argv = gdb.string_to_argv(arg)
        if not argv:
            raise gdb.GdbError("usage: weft-bt FIBER-ID [COUNT]")
        fid = int(argv[0], 0)
        limit = int(argv[1]) if len(argv) > 1 else 64
        lay = Layout()
        f, st = _find(lay, fid)
        if STATES.get(st) == "running":
            raise gdb.GdbError("weft: fiber %d is running: `thread apply all bt` shows it on its carrier" % fid)
        fr = FRAMES[_arch()]
        sp = _u(f + lay.f_sp, lay.ptr)
        names = fr["names"]
        regs = {names["pc"]: _u(sp + fr["pc"], 8), names["sp"]: sp + fr["sp_after"],
                names["fp"]: _u(sp + fr["fp"], 8)}
        for r, off in fr["regs"].items():
            regs[r] = _u(sp + off, 8)
        print("weft: fiber %d (%s), from the registers it saved:" % (fid, STATES.get(st, "?")))
        top = gdb.newest_frame()
        _unwinder.innermost = (int(top.read_register(names["sp"])), int(top.read_register(names["pc"])))
        _unwinder.regs = regs
        gdb.invalidate_cached_frames()
        try:
            frame = gdb.newest_frame().older()  # the fiber's resume point
            if frame is None or frame.pc() != regs[names["pc"]]:
                raise gdb.GdbError("weft: gdb did not take the fiber's registers (this gdb's frame unwinder API "
                                   "differs); the fiber resumes at %#x" % regs[names["pc"]])
            n = 0
            while frame is not None and n < limit:
                pc = frame.pc()
                fn = frame.name() or _symbol(pc)
                sal = frame.find_sal()
                where = ""
                if sal and sal.symtab:
                    where = " at %s:%d" % (sal.symtab.filename, sal.line)
                else:
                    solib = gdb.solib_name(pc)
                    if solib:
                        where = " from %s" % solib
                print("#%-2d %#018x in %s ()%s" % (n, pc, fn, where))
                older = frame.older()
                if older is None and frame.unwind_stop_reason() != gdb.FRAME_UNWIND_OUTERMOST:
                    print("(backtrace stopped: %s)" % gdb.frame_stop_reason_string(frame.unwind_stop_reason()))
                frame = older
                n += 1
        finally:
            _unwinder.regs = None
            gdb.invalidate_cached_frames()


InfoWeftFibers()
WeftBt()
