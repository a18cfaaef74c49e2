! weft's Fortran module: `use weft`.
!
! Fortran 2018 bindings (iso_c_binding) to include/weft.h, and to
! include/weft_mpi.h's weft_mpi_pmap when weft is built with MPI: the kinds,
! weft_pmap_opts, weft_pmap, weft_pmap_range and weft_reduce (and their
! weft_mpi_ forms), the futures, sleeping and the clock. Each name
! is the C call's, with the C contract (weft.h says what each does, which
! errors it returns, which contexts may call it); this file only says how
! the arguments look from Fortran:
!
!  - Callbacks are BIND(C) procedures with VALUE arguments, passed by name:
!
!      integer(c_int) function square(ctx, i) bind(c)
!        type(c_ptr), value :: ctx
!        integer(c_size_t), value :: i      ! 0-based, as in C: element i is x(i + 1)
!
!    Put them in a module (or make them external): an internal procedure
!    (one after CONTAINS in a program or procedure) passed as an argument
!    needs a trampoline on the stack, which makes the executable's stack
!    executable, and it must not outlive its host.
!  - ctx is a type(c_ptr): c_loc(x) of a TARGET array, c_null_ptr for none;
!    inside the callback, c_f_pointer(ctx, x, [n]) gets the array back.
!  - opts is OPTIONAL where C takes NULL for the defaults; a
!    type(weft_pmap_opts) starts with every field at its default.
!  - Sizes and indices are integer(c_size_t); weft_pmap also takes a default
!    INTEGER n. Deadlines and durations are integer(c_int64_t) nanoseconds
!    (weft_now_ns() + 500000000_c_int64_t is 500 ms from now).
!  - Errors are the C values: 0, or a negative errno; weft_strerror(rc)
!    returns the message as a Fortran string.
!  - Futures are type(c_ptr) handles, and results are type(c_ptr) too.
!  - weft_mpi_pmap takes the communicator as a Fortran handle: the INTEGER
!    of `use mpi` (MPI_COMM_WORLD), or comm%MPI_VAL of `use mpi_f08`. Its
!    callback writes elem_size bytes at out (a type(c_ptr); c_f_pointer it
!    to the result's type).
!
! Link: the module's library, weft_fortran (CMake: weft::fortran;
! pkg-config: weft-fortran), and weft_mpi (weft::mpi) for weft_mpi_pmap.
! docs/fortran.md has a complete example.
module weft
  use, intrinsic :: iso_c_binding, only: c_int, c_size_t, c_int64_t, c_ptr, c_bool, c_char, c_null_char, &
                                         c_associated, c_f_pointer
  implicit none
  private

  ! ------------------------------------------------------------------------
  ! Kinds, options
  ! ------------------------------------------------------------------------

  !> weft_kind: what a piece of work does, which decides where it runs.
  integer(c_int), parameter, public :: WEFT_CPU = 0      ! computes: OpenMP tasks
  integer(c_int), parameter, public :: WEFT_BLOCKING = 1 ! waits: fibers

  !> weft_pmap_opts: every field starts at its default (WEFT_PMAP_OPTS_INIT).
  type, bind(c), public :: weft_pmap_opts
    integer(c_int) :: kind = WEFT_CPU           ! WEFT_CPU or WEFT_BLOCKING
    integer(c_size_t) :: grain = 0_c_size_t     ! CPU: indices per claim; 0 = automatic
    integer(c_size_t) :: max_parallel = 0_c_size_t ! BLOCKING: most elements in flight; 0 = no bound
    integer(c_int) :: flags = 0                 ! C's unsigned flags (weft.h)
  end type weft_pmap_opts

#ifdef WEFT_HAVE_MPI
  !> weft_mpi_pmap_opts.schedule and .root (weft_mpi.h).
  integer(c_int), parameter, public :: WEFT_MPI_STATIC = 0
  integer(c_int), parameter, public :: WEFT_MPI_DYNAMIC = 1
  integer(c_int), parameter, public :: WEFT_MPI_ALL = -1

  !> weft_mpi_pmap_opts: every field starts at its default (WEFT_MPI_PMAP_OPTS_INIT).
  type, bind(c), public :: weft_mpi_pmap_opts
    type(weft_pmap_opts) :: local                ! each rank's weft_pmap
    integer(c_int) :: schedule = WEFT_MPI_STATIC ! or WEFT_MPI_DYNAMIC
    integer(c_size_t) :: chunk = 0_c_size_t      ! DYNAMIC: indices per claim; 0 = automatic
    integer(c_int) :: root = 0                   ! the rank that receives the results, or WEFT_MPI_ALL
  end type weft_mpi_pmap_opts
#endif

  ! ------------------------------------------------------------------------
  ! Callbacks
  ! ------------------------------------------------------------------------

  abstract interface
    !> weft_index_fn: one element of weft_pmap; return 0, or nonzero as an error.
    integer(c_int) function weft_index_fn(ctx, i) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: i
    end function weft_index_fn

    !> weft_range_fn: one sub-range [lo, hi) of weft_pmap_range; return 0, or nonzero as an error.
    integer(c_int) function weft_range_fn(ctx, lo, hi) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: lo, hi
    end function weft_range_fn

    !> weft_reduce_fn: fold [lo, hi) into acc (a copy of the identity; size bytes).
    subroutine weft_reduce_fn(ctx, lo, hi, acc) bind(c)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: lo, hi
      type(c_ptr), value :: acc
    end subroutine weft_reduce_fn

    !> weft_combine_fn: acc = acc (+) other, other covering the indices right after acc's.
    subroutine weft_combine_fn(ctx, acc, other) bind(c)
      import :: c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr), value :: acc
      type(c_ptr), value :: other
    end subroutine weft_combine_fn

    !> weft_task_fn: a future's function; its result is what weft_future_get returns.
    type(c_ptr) function weft_task_fn(arg) bind(c)
      import :: c_ptr
      type(c_ptr), value :: arg
    end function weft_task_fn

#ifdef WEFT_HAVE_MPI
    !> weft_mpi_fn: one element of weft_mpi_pmap: writes elem_size bytes at out.
    integer(c_int) function weft_mpi_fn(ctx, i, out) bind(c)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: ctx
      integer(c_size_t), value :: i
      type(c_ptr), value :: out
    end function weft_mpi_fn
#endif
  end interface
  public :: weft_index_fn, weft_task_fn, weft_range_fn, weft_reduce_fn, weft_combine_fn
#ifdef WEFT_HAVE_MPI
  public :: weft_mpi_fn
#endif

  ! ------------------------------------------------------------------------
  ! Parallel map
  ! ------------------------------------------------------------------------

  !> rc = weft_pmap(n, fn, ctx [, opts]): fn(ctx, i) for every i in [0, n).
  interface weft_pmap
    integer(c_int) function weft_pmap_c(n, fn, ctx, opts) bind(c, name="weft_pmap")
      import :: c_int, c_size_t, c_ptr, weft_index_fn, weft_pmap_opts
      integer(c_size_t), value :: n
      procedure(weft_index_fn) :: fn
      type(c_ptr), value :: ctx
      type(weft_pmap_opts), intent(in), optional :: opts
    end function weft_pmap_c
    module procedure weft_pmap_int
  end interface weft_pmap
  public :: weft_pmap

  !> WEFT_REDUCE_LEAVES, WEFT_REDUCE_GRAIN_MIN: weft_reduce's automatic grain (weft.h).
  integer(c_size_t), parameter, public :: WEFT_REDUCE_LEAVES = 1024_c_size_t
  integer(c_size_t), parameter, public :: WEFT_REDUCE_GRAIN_MIN = 1024_c_size_t

  interface
    !> rc = weft_pmap_range(n, fn, ctx [, opts]): fn(ctx, lo, hi) on sub-ranges covering [0, n) once.
    integer(c_int) function weft_pmap_range(n, fn, ctx, opts) bind(c, name="weft_pmap_range")
      import :: c_int, c_size_t, c_ptr, weft_range_fn, weft_pmap_opts
      integer(c_size_t), value :: n
      procedure(weft_range_fn) :: fn
      type(c_ptr), value :: ctx
      type(weft_pmap_opts), intent(in), optional :: opts
    end function weft_pmap_range

    !> rc = weft_reduce(n, fn, combine, ctx, identity, result, size [, opts]): deterministic reduction.
    integer(c_int) function weft_reduce(n, fn, combine, ctx, identity, result, size, opts) bind(c, name="weft_reduce")
      import :: c_int, c_size_t, c_ptr, weft_reduce_fn, weft_combine_fn, weft_pmap_opts
      integer(c_size_t), value :: n
      procedure(weft_reduce_fn) :: fn
      procedure(weft_combine_fn) :: combine
      type(c_ptr), value :: ctx
      type(c_ptr), value :: identity
      type(c_ptr), value :: result
      integer(c_size_t), value :: size
      type(weft_pmap_opts), intent(in), optional :: opts
    end function weft_reduce
  end interface
  public :: weft_pmap_range, weft_reduce

#ifdef WEFT_HAVE_MPI
  !> rc = weft_mpi_pmap(comm, n, elem_size, fn, ctx, results [, opts]): collective over comm.
  interface
    integer(c_int) function weft_mpi_pmap(comm, n, elem_size, fn, ctx, results, opts) bind(c, name="weft_mpi_pmap_f")
      import :: c_int, c_size_t, c_ptr, weft_mpi_fn, weft_mpi_pmap_opts
      integer(c_int), value :: comm ! MPI_Fint
      integer(c_size_t), value :: n
      integer(c_size_t), value :: elem_size
      procedure(weft_mpi_fn) :: fn
      type(c_ptr), value :: ctx
      type(c_ptr), value :: results
      type(weft_mpi_pmap_opts), intent(in), optional :: opts
    end function weft_mpi_pmap
  end interface
  public :: weft_mpi_pmap

  interface
    !> rc = weft_mpi_pmap_range(comm, n, fn, ctx [, opts]): collective; fn sees global indices.
    integer(c_int) function weft_mpi_pmap_range(comm, n, fn, ctx, opts) bind(c, name="weft_mpi_pmap_range_f")
      import :: c_int, c_size_t, c_ptr, weft_range_fn, weft_mpi_pmap_opts
      integer(c_int), value :: comm ! MPI_Fint
      integer(c_size_t), value :: n
      procedure(weft_range_fn) :: fn
      type(c_ptr), value :: ctx
      type(weft_mpi_pmap_opts), intent(in), optional :: opts
    end function weft_mpi_pmap_range

    !> rc = weft_mpi_reduce(comm, n, fn, combine, ctx, identity, result, size [, opts]): collective, deterministic.
    integer(c_int) function weft_mpi_reduce(comm, n, fn, combine, ctx, identity, result, size, opts) &
        bind(c, name="weft_mpi_reduce_f")
      import :: c_int, c_size_t, c_ptr, weft_reduce_fn, weft_combine_fn, weft_mpi_pmap_opts
      integer(c_int), value :: comm ! MPI_Fint
      integer(c_size_t), value :: n
      procedure(weft_reduce_fn) :: fn
      procedure(weft_combine_fn) :: combine
      type(c_ptr), value :: ctx
      type(c_ptr), value :: identity
      type(c_ptr), value :: result
      integer(c_size_t), value :: size
      type(weft_mpi_pmap_opts), intent(in), optional :: opts
    end function weft_mpi_reduce
  end interface
  public :: weft_mpi_pmap_range, weft_mpi_reduce
#endif

  ! ------------------------------------------------------------------------
  ! Futures, time, the runtime
  ! ------------------------------------------------------------------------

  interface
    !> rc = weft_future_start(kind, fn, arg, f): f receives the future (release it with weft_future_free).
    integer(c_int) function weft_future_start(kind, fn, arg, f) bind(c, name="weft_future_start")
      import :: c_int, c_ptr, weft_task_fn
      integer(c_int), value :: kind
      procedure(weft_task_fn) :: fn
      type(c_ptr), value :: arg
      type(c_ptr), intent(out) :: f
    end function weft_future_start

    !> rc = weft_future_get(f, deadline_ns [, result]): -1 waits for ever.
    integer(c_int) function weft_future_get(f, deadline_ns, result) bind(c, name="weft_future_get")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: f
      integer(c_int64_t), value :: deadline_ns
      type(c_ptr), intent(out), optional :: result
    end function weft_future_get

    logical(c_bool) function weft_future_done(f) bind(c, name="weft_future_done")
      import :: c_bool, c_ptr
      type(c_ptr), value :: f
    end function weft_future_done

    integer(c_int) function weft_future_cancel(f) bind(c, name="weft_future_cancel")
      import :: c_int, c_ptr
      type(c_ptr), value :: f
    end function weft_future_cancel

    subroutine weft_future_free(f) bind(c, name="weft_future_free")
      import :: c_ptr
      type(c_ptr), value :: f
    end subroutine weft_future_free

    logical(c_bool) function weft_cancelled() bind(c, name="weft_cancelled")
      import :: c_bool
    end function weft_cancelled

    integer(c_int64_t) function weft_now_ns() bind(c, name="weft_now_ns")
      import :: c_int64_t
    end function weft_now_ns

    integer(c_int) function weft_sleep_ns(ns) bind(c, name="weft_sleep_ns")
      import :: c_int, c_int64_t
      integer(c_int64_t), value :: ns
    end function weft_sleep_ns

    integer(c_int) function weft_sleep_until(deadline_ns) bind(c, name="weft_sleep_until")
      import :: c_int, c_int64_t
      integer(c_int64_t), value :: deadline_ns
    end function weft_sleep_until

    integer(c_int) function weft_yield() bind(c, name="weft_yield")
      import :: c_int
    end function weft_yield

    logical(c_bool) function weft_in_fiber() bind(c, name="weft_in_fiber")
      import :: c_bool
    end function weft_in_fiber

    logical(c_bool) function weft_fibers_available() bind(c, name="weft_fibers_available")
      import :: c_bool
    end function weft_fibers_available

    !> C's unsigned; carriers never number more than an int holds.
    integer(c_int) function weft_carrier_count() bind(c, name="weft_carrier_count")
      import :: c_int
    end function weft_carrier_count

    subroutine weft_shutdown() bind(c, name="weft_shutdown")
    end subroutine weft_shutdown

    type(c_ptr) function weft_strerror_c(err) bind(c, name="weft_strerror")
      import :: c_int, c_ptr
      integer(c_int), value :: err
    end function weft_strerror_c
  end interface
  public :: weft_future_start, weft_future_get, weft_future_done, weft_future_cancel, weft_future_free
  public :: weft_cancelled, weft_now_ns, weft_sleep_ns, weft_sleep_until, weft_yield, weft_in_fiber
  public :: weft_fibers_available, weft_carrier_count, weft_shutdown, weft_strerror

contains

  !> weft_pmap with a default INTEGER n (negative n is -EINVAL, as no element could run).
  integer(c_int) function weft_pmap_int(n, fn, ctx, opts) result(rc)
    integer, intent(in) :: n
    procedure(weft_index_fn) :: fn
    type(c_ptr), intent(in) :: ctx
    type(weft_pmap_opts), intent(in), optional :: opts
    if (n < 0) then
      rc = -22 ! -EINVAL
      return
    end if
    rc = weft_pmap_c(int(n, c_size_t), fn, ctx, opts)
  end function weft_pmap_int

  !> The message for any value a weft call returns, as a Fortran string.
  function weft_strerror(err) result(msg)
    integer(c_int), intent(in) :: err
    character(len=:), allocatable :: msg
    character(kind=c_char), pointer :: s(:)
    integer :: len
    type(c_ptr) :: p
    p = weft_strerror_c(err)
    if (.not. c_associated(p)) then
      msg = ""
      return
    end if
    call c_f_pointer(p, s, [4096])
    len = 0
    do while (len < size(s))
      if (s(len + 1) == c_null_char) exit
      len = len + 1
    end do
    allocate (character(len=len) :: msg)
    msg = transfer(s(1:len), msg)
  end function weft_strerror

end module weft
