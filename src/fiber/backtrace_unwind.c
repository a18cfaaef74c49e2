/*
 * This file contains backtraces of suspended fibers on x86-64 with
 * libunwind (backtrace.h): the registers a context saved (frame.h) are put
 * into a context of libunwind's own (on x86-64 a ucontext_t), and libunwind
 * steps from there with the DWARF call-frame information of every module, as
 * it would from a signal frame. Names come from libdw (function, file and
 * line where the module has debug information) when weft was built with it,
 * else from the ELF symbol tables (libunwind) or the dynamic ones (dladdr).
 */
#define UNW_LOCAL_ONLY
#include "backtrace.h"

#include <libunwind.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#ifdef WEFT_HAVE_LIBDW
#include <elfutils/libdwfl.h>
#endif

struct weft__symbols {
#ifdef WEFT_HAVE_LIBDW
  Dwfl *dwfl;
#else
  int unused;
#endif
};

weft__symbols *weft__symbols_open(const char **why) {
  weft__symbols *s = calloc(1, sizeof *s);
  if (!s) {
    *why = "no memory for the symbol tables";
    return NULL;
  }
#ifdef WEFT_HAVE_LIBDW
  static char *debuginfo_path = NULL;
  static const Dwfl_Callbacks cb = {
      .find_elf = dwfl_linux_proc_find_elf,
      .find_debuginfo = dwfl_standard_find_debuginfo,
      .debuginfo_path = &debuginfo_path,
  };
  s->dwfl = dwfl_begin(&cb);
  if (s->dwfl &&
      (dwfl_linux_proc_report(s->dwfl, getpid()) != 0 || dwfl_report_end(s->dwfl, NULL, NULL) != 0)) {
    dwfl_end(s->dwfl);
    s->dwfl = NULL; /* names from libunwind and dladdr then */
  }
#endif
  return s;
}

void weft__symbols_close(weft__symbols *s) {
  if (!s) return;
#ifdef WEFT_HAVE_LIBDW
  if (s->dwfl) dwfl_end(s->dwfl);
#endif
  free(s);
}

int weft__backtrace(const weft__frame *fr, uintptr_t *pcs, int max) {
  unw_context_t uc;
  if (max <= 0 || unw_getcontext(&uc) != 0) return 0;
  greg_t *g = uc.uc_mcontext.gregs;
  g[REG_RIP] = (greg_t)fr->pc;
  g[REG_RSP] = (greg_t)fr->sp;
  g[REG_RBP] = (greg_t)fr->fp;
  g[REG_RBX] = (greg_t)fr->callee[0];
  g[REG_R12] = (greg_t)fr->callee[1];
  g[REG_R13] = (greg_t)fr->callee[2];
  g[REG_R14] = (greg_t)fr->callee[3];
  g[REG_R15] = (greg_t)fr->callee[4];
  unw_cursor_t cur;
  if (unw_init_local(&cur, &uc) != 0) return 0;
  int n = 0;
  do {
    unw_word_t ip = 0;
    if (unw_get_reg(&cur, UNW_REG_IP, &ip) != 0 || ip == 0) break;
    pcs[n++] = (uintptr_t)ip;
  } while (n < max && unw_step(&cur) > 0);
  return n;
}

void weft__symbolize(weft__symbols *s, uintptr_t pc, char *buf, size_t cap) {
  /* A return address: look up the call before it, which is in the same function and line. */
  uintptr_t at = pc > 0 ? pc - 1 : pc;
#ifdef WEFT_HAVE_LIBDW
  if (s && s->dwfl) {
    Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, (Dwarf_Addr)at);
    if (mod) {
      GElf_Off off = 0;
      GElf_Sym sym;
      const char *name = dwfl_module_addrinfo(mod, (Dwarf_Addr)at, &off, &sym, NULL, NULL, NULL);
      const char *lib = dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
      const char *base = lib ? strrchr(lib, '/') : NULL;
      base = base ? base + 1 : lib ? lib : "?";
      int line = 0;
      Dwfl_Line *l = dwfl_module_getsrc(mod, (Dwarf_Addr)at);
      const char *file = l ? dwfl_lineinfo(l, NULL, &line, NULL, NULL, NULL) : NULL;
      const char *fbase = file ? strrchr(file, '/') : NULL;
      fbase = fbase ? fbase + 1 : file;
      if (name && fbase)
        snprintf(buf, cap, "%s+0x%llx (%s:%d, %s)", name, (unsigned long long)(off + 1), fbase, line, base);
      else if (name)
        snprintf(buf, cap, "%s+0x%llx (%s)", name, (unsigned long long)(off + 1), base);
      else
        snprintf(buf, cap, "%#llx (%s)", (unsigned long long)pc, base);
      return;
    }
  }
#else
  WEFT__UNUSED(s);
  WEFT__UNUSED(at);
#endif
  weft__describe_site((const void *)pc, buf, cap);
}
