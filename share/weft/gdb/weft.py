# weft's gdb extension: the fibers of a weft program, live or in a core file.
#
#   (gdb) source /usr/local/share/weft/gdb/weft.py     (wherever weft is installed)
#   (gdb) info weft-fibers                 every started fiber: id, carrier, state, wait, what started it
#   (gdb) weft-bt 17                       the backtrace of parked fiber 17, through gdb's own unwinder
#   (gdb) weft-gcore hung.core             a core file of the live process that holds the fibers' stacks
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
# weft-gcore is for the process that may not be killed: gdb's own gcore
# gives up on a mapping at its first unreadable page, and a chunk of fiber
# stacks has a guard (MADV_GUARD_INSTALL markers, Linux 6.13+) below every
# stack, so gcore writes the fibers' stacks as zeros. weft-gcore runs gcore,
# then copies into the core, page by page around the guards, every readable
# page of the mappings gcore gave up on (what the kernel's own dump does),
# found through /proc/PID/pagemap and read through /proc/PID/mem. It writes
# nothing into the process and runs no code in it: the guards are never
# lifted. It then checks that every parked fiber's saved frame is in the core
# as it is in the process. Live processes on this machine only; it refuses a
# core file.
#
# docs/debugging.md has a worked session.

import bisect
import os
import re
import struct
import time

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



# ---- weft-gcore -------------------------------------------------------------
#
# gdb's gcore reads each mapping in blocks of 1 MiB and, at the first block it
# cannot read, warns and leaves the rest of that mapping as zeros. A chunk of
# fiber stacks is one mapping with a guard (MADV_GUARD_INSTALL markers) below
# every stack, so its first block fails and every stack in it is lost; weft's
# alternate signal stacks, guarded the same way, too. The kernel's own dump
# skips such pages one by one. weft-gcore runs gcore, then does what the
# kernel does for the mappings gcore gave up on: it finds their pages in
# /proc/PID/pagemap and copies every readable page from /proc/PID/mem into the
# core file, at the offset gcore reserved for it. It writes nothing into the
# process and runs no code in it.

# The top byte of a pagemap entry (bits 56-63): bit 63 present, 62 swapped (or
# a PTE marker, as a guard is), 58 guard region (Linux 6.14+).
_PM_PRESENT, _PM_SWAP, _PM_GUARD = 0x80, 0x40, 0x04
# One letter per page: P present, G guard (unreadable), S swapped or a guard
# on a kernel without the guard bit (tried), R swapped and readable, . neither.
_PM_CODES = bytes(ord("P") if b & _PM_PRESENT else
                  (ord("G") if b & _PM_GUARD else ord("S")) if b & _PM_SWAP else ord(".")
                  for b in range(256))
_PM_WINDOW = 1 << 20  # pages of pagemap read at a time (8 MiB of entries)
_COPY_BLOCK = 1 << 20  # bytes copied per read and write


def _pread_all(fd, n, off):
    """n bytes at off, or None where any of them cannot be read."""
    out = bytearray()
    while len(out) < n:
        try:
            b = os.pread(fd, n - len(out), off + len(out))
        except OSError:
            return None
        if not b:
            return None
        out += b
    return bytes(out)


def _core_loads(path):
    """The PT_LOAD segments of an ELF64 little-endian core with contents in the file: (vaddr, offset, filesz)."""
    with open(path, "rb") as f:
        eh = f.read(64)
        if len(eh) < 64 or eh[:4] != b"\x7fELF" or eh[4] != 2 or eh[5] != 1:
            raise gdb.GdbError("weft-gcore: %s is not an ELF64 little-endian core (what gcore wrote?)" % path)
        phoff, shoff = struct.unpack_from("<QQ", eh, 32)
        phentsize, phnum = struct.unpack_from("<HH", eh, 54)
        if phnum == 0xFFFF:  # PN_XNUM: more than 65534 segments, the count is in section 0's sh_info
            f.seek(shoff + 44)
            phnum = struct.unpack("<I", f.read(4))[0]
        f.seek(phoff)
        raw = f.read(phentsize * phnum)
    loads = []
    for i in range(phnum):
        p_type, _flags, off, vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", raw, i * phentsize)
        if p_type == 1 and filesz:
            loads.append((vaddr, off, filesz))
    return loads


def _private_anon(pid):
    """Start addresses of the private anonymous mappings: their pages neither present nor swapped are zeros."""
    starts = set()
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split(None, 5)
            path = parts[5].strip() if len(parts) > 5 else ""
            if parts[1][3] == "p" and path in ("", "[heap]", "[stack]"):
                starts.add(int(parts[0].split("-")[0], 16))
    return starts


def _page_codes(pm, mem, vaddr, npages, page):
    """One letter per page of [vaddr, vaddr + npages pages) (see _PM_CODES), swapped pages tried; None when
    pagemap has no entries there (the vsyscall page)."""
    codes = bytearray()
    for w in range(0, npages, _PM_WINDOW):
        n = min(_PM_WINDOW, npages - w)
        raw = _pread_all(pm, 8 * n, (vaddr // page + w) * 8)
        if raw is None:
            return None
        codes += raw[7::8].translate(_PM_CODES)
    # A swapped page reads (the kernel swaps it in); a guard marker, where pagemap has no guard bit, fails.
    for m in list(re.finditer(b"S+", codes)):
        a, b = m.span()
        if _pread_all(mem, (b - a) * page, vaddr + a * page) is not None:
            codes[a:b] = b"R" * (b - a)
            continue
        for i in range(a, b):
            ok = _pread_all(mem, page, vaddr + i * page) is not None
            codes[i] = ord("R") if ok else ord("G")
    return codes


class WeftGcore(gdb.Command):
    """Write a core file of this live process with its fibers' stacks in it.
Usage: weft-gcore [FILE]        (FILE defaults to core.PID)

gdb's gcore, then every mapping that gcore could not read past a guard page
(fiber stacks, weft's signal stacks) is copied into FILE page by page, around
the guards, from /proc/PID/mem. Nothing is written into the process and no
code runs in it. A live process on this machine only (not a core file, not
gdbserver), all threads stopped."""

    def __init__(self):
        super().__init__("weft-gcore", gdb.COMMAND_FILES, gdb.COMPLETE_FILENAME)

    def invoke(self, arg, from_tty):
        inf = gdb.selected_inferior()
        conn = getattr(inf, "connection", None)
        kind = conn.type if conn is not None else None
        if kind is None and "core dump file" in gdb.execute("info files", to_string=True):
            kind = "core"  # a gdb older than 11, without Inferior.connection
        if kind == "core":
            raise gdb.GdbError("weft-gcore: this is a core file, not a live process; a core file is what weft-gcore "
                               "makes (info weft-fibers and weft-bt read this one as it is)")
        if inf.pid == 0:
            raise gdb.GdbError("weft-gcore: no live process (attach with gdb -p PID, or run the program)")
        if kind not in (None, "native"):
            raise gdb.GdbError("weft-gcore: the process must be on this machine (it reads /proc/%d); this target is "
                               "%s: use the kernel's core there (docs/debugging.md)" % (inf.pid, kind))
        if any(t.is_running() for t in inf.threads()):
            raise gdb.GdbError("weft-gcore: some threads are running (non-stop mode): interrupt them all first "
                               "(interrupt -a)")
        argv = gdb.string_to_argv(arg)
        if len(argv) > 1:
            raise gdb.GdbError("usage: weft-gcore [FILE]")
        path = os.path.abspath(os.path.expanduser(argv[0] if argv else "core.%d" % inf.pid))
        pid = inf.pid
        page = os.sysconf("SC_PAGE_SIZE")
        t0 = time.monotonic()
        fds = []
        try:
            for name in ("pagemap", "mem"):
                fds.append(os.open("/proc/%d/%s" % (pid, name), os.O_RDONLY | os.O_CLOEXEC))
        except OSError as e:
            for fd in fds:
                os.close(fd)
            raise gdb.GdbError("weft-gcore: cannot read /proc/%d/%s (%s)" % (pid, name, e.strerror))
        try:
            out = gdb.execute("gcore %s" % path, to_string=True)
            fixed, pages, guards = self._refill(path, pid, fds[0], fds[1], page)
        finally:
            for fd in fds:
                os.close(fd)
        # gcore's warnings about the mappings refilled here are answered; the others (the vsyscall page) stand.
        for line in out.splitlines():
            m = re.match(r"warning: Memory read failed for corefile section, \d+ bytes at (0x[0-9a-f]+)", line)
            if not m or int(m.group(1), 16) not in fixed:
                print(line)
        print("weft-gcore: gcore stopped at the guard pages of %d mapping%s; copied %d pages (%.1f MiB) of them "
              "around %d guard pages, in %.2f s" % (len(fixed), "" if len(fixed) == 1 else "s", pages,
                                                     pages * page / 1048576.0, guards, time.monotonic() - t0))
        self._verify(path)

    @staticmethod
    def _refill(path, pid, pm, mem, page):
        """Copy the readable pages of every mapping gcore gave up on; (their addresses, pages copied, guards)."""
        anon = _private_anon(pid)
        fixed = set()
        copied = guards = 0
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            for vaddr, off, filesz in _core_loads(path):
                npages = filesz // page
                codes = _page_codes(pm, mem, vaddr, npages, page)
                if codes is None or b"G" not in codes:
                    continue  # gcore read all of it
                fixed.add(vaddr)
                guards += codes.count(b"G")
                # A private anonymous page neither present nor swapped is a zero, as the file already holds.
                want = rb"[PR]+" if vaddr in anon else rb"[^G]+"
                for m in re.finditer(want, codes):
                    a, b = m.start() * page, m.end() * page
                    copied += m.end() - m.start()
                    for x in range(a, b, _COPY_BLOCK):
                        n = min(_COPY_BLOCK, b - x)
                        data = _pread_all(mem, n, vaddr + x)
                        if data is None:
                            raise gdb.GdbError("weft-gcore: %#x..%#x of the process could not be read; %s lacks it"
                                               % (vaddr + x, vaddr + x + n, path))
                        os.pwrite(fd, data, off + x)
        finally:
            os.close(fd)
        return fixed, copied, guards

    @staticmethod
    def _verify(path):
        """Every fiber that saved its registers has its switch frame in the core, as in the process."""
        try:
            lay = Layout()
        except gdb.GdbError as e:
            # Not a weft program, or a weft this script cannot read: the core is written all the same.
            print("weft-gcore: no fibers checked (%s)" % e)
            return
        if _u(lay.rt + lay.rt_state, 4) != 1:
            print("weft-gcore: no fibers checked (the fiber runtime is not running)")
            return
        size = FRAMES[_arch()]["sp_after"]
        frames = []  # (sp, fiber id) of every fiber whose registers are saved on its stack
        for _cid, _extra, fib in _fibers(lay):
            if STATES.get(_u(fib + lay.f_state, 1)) in ("parked", "runnable"):
                sp = _u(fib + lay.f_sp, lay.ptr)
                if sp:
                    frames.append((sp, _u(fib + lay.f_id, 8)))
        frames.sort()  # the core is read in address order: its segments are too
        loads = sorted(_core_loads(path))
        starts = [v for v, _o, _sz in loads]
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            for sp, fid in frames:
                i = bisect.bisect_right(starts, sp) - 1
                data = None
                if i >= 0 and sp + size <= loads[i][0] + loads[i][2]:
                    data = _pread_all(fd, size, loads[i][1] + sp - loads[i][0])
                if data != _mem(sp, size):
                    raise gdb.GdbError("weft-gcore: fiber %d's stack at %#x is not in %s as it is in the process"
                                       % (fid, sp, path))
        finally:
            os.close(fd)
        n = len(frames)
        print("weft-gcore: the saved frames of all %d parked or runnable fibers are in %s" % (n, path))


InfoWeftFibers()
WeftBt()
WeftGcore()
