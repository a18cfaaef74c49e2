! Test "fortran": the Fortran module (use weft). weft_pmap maps 10^6 indices
! with each kind (and the default INTEGER n), and every result is checked;
! weft_pmap_range covers every index once; weft_reduce's sum is bitwise the
! tree weft.h describes;
! the lowest failing index's error; futures of both kinds, with results and
! deadlines; sleeping; weft_strerror. Exits 1 on the first failed check.
module fortran_test_cb
  use, intrinsic :: iso_c_binding
  use weft
  implicit none
  integer(c_size_t), parameter :: n = 1000000_c_size_t
  integer(c_int64_t), allocatable, target :: x(:)
  integer(c_int), allocatable, target :: runs(:)
contains
  ! x(i + 1) = i**2 (exactly, as integers), and count the run (an index runs once, so no two elements touch one slot).
  integer(c_int) function square(ctx, i) bind(c)
    type(c_ptr), value :: ctx
    integer(c_size_t), value :: i
    integer(c_int64_t), pointer :: y(:)
    call c_f_pointer(ctx, y, [n])
    y(i + 1) = int(i, c_int64_t)**2
    runs(i + 1) = runs(i + 1) + 1
    square = 0
  end function square

  ! The same, on a fiber that yields first (a blocking element).
  integer(c_int) function square_blocking(ctx, i) bind(c)
    type(c_ptr), value :: ctx
    integer(c_size_t), value :: i
    integer(c_int) :: rc
    rc = 0
    if (mod(i, 1000_c_size_t) == 0) rc = weft_sleep_ns(0_c_int64_t)
    square_blocking = square(ctx, i) + rc
  end function square_blocking

  ! Fails at every index ending in 999: the lowest is 999, which returns 100 + 999.
  integer(c_int) function fail_some(ctx, i) bind(c)
    type(c_ptr), value :: ctx
    integer(c_size_t), value :: i
    fail_some = square(ctx, i)
    if (mod(i, 1000_c_size_t) == 999) fail_some = int(100 + i, c_int)
  end function fail_some

  ! weft_pmap_range: x(i + 1) = i**2 for every i of [lo, hi), each counted.
  integer(c_int) function square_range(ctx, lo, hi) bind(c)
    type(c_ptr), value :: ctx
    integer(c_size_t), value :: lo, hi
    integer(c_size_t) :: i
    integer(c_int) :: rc
    square_range = 0
    do i = lo, hi - 1
      rc = square(ctx, i)
    end do
  end function square_range

  ! weft_reduce: acc = acc + the sum of x(lo + 1 : hi) (real(c_double), the identity 0).
  subroutine sum_leaf(ctx, lo, hi, acc) bind(c)
    type(c_ptr), value :: ctx
    integer(c_size_t), value :: lo, hi
    type(c_ptr), value :: acc
    real(c_double), pointer :: a, y(:)
    integer(c_size_t) :: i
    call c_f_pointer(acc, a)
    call c_f_pointer(ctx, y, [n])
    do i = lo + 1, hi
      a = a + y(i)
    end do
  end subroutine sum_leaf

  subroutine sum_combine(ctx, acc, other) bind(c)
    type(c_ptr), value :: ctx
    type(c_ptr), value :: acc
    type(c_ptr), value :: other
    real(c_double), pointer :: a, b
    call c_f_pointer(acc, a)
    call c_f_pointer(other, b)
    a = a + b
    if (.not. c_associated(ctx)) error stop 2 ! the caller's ctx reaches combine too
  end subroutine sum_combine

  ! weft_reduce's tree, evaluated here (weft.h): leaves of at most g, halves combined left + right.
  recursive function tree_sum(y, lo, hi, g) result(s)
    real(c_double), intent(in) :: y(:)
    integer(c_size_t), intent(in) :: lo, hi, g
    real(c_double) :: s
    integer(c_size_t) :: i, mid
    if (hi - lo <= g) then
      s = 0.0_c_double
      do i = lo + 1, hi
        s = s + y(i)
      end do
    else
      mid = lo + (hi - lo) / 2
      s = tree_sum(y, lo, mid, g)
      s = s + tree_sum(y, mid, hi, g)
    end if
  end function tree_sum

  ! A future: sleeps 1 ms, then returns its argument.
  type(c_ptr) function nap(arg) bind(c)
    type(c_ptr), value :: arg
    integer(c_int) :: rc
    rc = weft_sleep_ns(1000000_c_int64_t)
    nap = arg
    if (rc /= 0) nap = c_null_ptr
  end function nap
end module fortran_test_cb

program test_fortran
  use, intrinsic :: iso_c_binding
  use weft
  use fortran_test_cb
  implicit none
  type(weft_pmap_opts) :: o
  type(c_ptr) :: f, res
  integer(c_int) :: rc, k
  integer(c_int), target :: token
  integer(c_int64_t) :: t0

  allocate (x(n), runs(n))

  ! Defaults: every field of weft_pmap_opts starts as WEFT_PMAP_OPTS_INIT.
  call check(o%kind == WEFT_CPU .and. o%grain == 0 .and. o%max_parallel == 0 .and. o%flags == 0, "defaults")

  ! 10^6 indices with each kind, with the options absent, and with a grain.
  do k = 0, 3
    x = -1
    runs = 0
    select case (k)
    case (0)
      rc = weft_pmap(n, square, c_loc(x))
    case (1)
      o = weft_pmap_opts(grain=1000_c_size_t)
      rc = weft_pmap(n, square, c_loc(x), o)
    case (2)
      o = weft_pmap_opts(kind=WEFT_BLOCKING)
      rc = weft_pmap(n, square_blocking, c_loc(x), o)
    case (3)
      o = weft_pmap_opts(kind=WEFT_BLOCKING, max_parallel=64_c_size_t)
      rc = weft_pmap(n, square_blocking, c_loc(x), o)
    end select
    call check(rc == 0, "weft_pmap returned 0")
    call check_all()
  end do

  ! A default INTEGER n.
  x = -1
  runs = 0
  rc = weft_pmap(int(n), square, c_loc(x))
  call check(rc == 0, "weft_pmap with a default INTEGER n")
  call check_all()
  call check(weft_pmap(-1, square, c_loc(x)) == -22, "a negative n is -EINVAL")

  ! The lowest failing index's error; every element still runs.
  runs = 0
  rc = weft_pmap(n, fail_some, c_loc(x))
  call check(rc == 1099, "the lowest failing index's error")
  call check(all(runs == 1), "every element ran once despite the errors")
  o = weft_pmap_opts(kind=7)
  call check(weft_pmap(n, square, c_loc(x), o) == -22, "a bad kind is -EINVAL")

  ! weft_pmap_range: every index once, with the automatic grain and with one.
  do k = 0, 1
    x = -1
    runs = 0
    if (k == 0) then
      rc = weft_pmap_range(n, square_range, c_loc(x))
    else
      o = weft_pmap_opts(grain=777_c_size_t)
      rc = weft_pmap_range(n, square_range, c_loc(x), o)
    end if
    call check(rc == 0, "weft_pmap_range returned 0")
    call check_all()
  end do

  ! weft_reduce: a sum of mixed magnitudes, bitwise the tree evaluated here.
  block
    real(c_double), allocatable, target :: v(:)
    real(c_double), target :: zero, total
    real(c_double) :: want
    integer(c_size_t) :: i, g
    allocate (v(n))
    do i = 1, n
      v(i) = merge(1.0e12_c_double, 1.0e-3_c_double, mod(i, 7_c_size_t) == 0) * sin(real(i, c_double))
    end do
    zero = 0.0_c_double
    total = -1.0_c_double
    rc = weft_reduce(n, sum_leaf, sum_combine, c_loc(v), c_loc(zero), c_loc(total), 8_c_size_t)
    call check(rc == 0, "weft_reduce returned 0")
    i = n + WEFT_REDUCE_LEAVES - 1 ! (not a constant: gfortran warns of a constant's truncated division)
    g = max(WEFT_REDUCE_GRAIN_MIN, i / WEFT_REDUCE_LEAVES)
    want = tree_sum(v, 0_c_size_t, n, g)
    call check(transfer(total, 0_c_int64_t) == transfer(want, 0_c_int64_t), "weft_reduce is bitwise its tree")
    call check(weft_reduce(n, sum_leaf, sum_combine, c_loc(v), c_loc(zero), c_loc(total), 0_c_size_t) == -22, &
               "a size of 0 is -EINVAL")
  end block

  ! Futures of both kinds; their results; a deadline that passes.
  do k = 0, 1
    rc = weft_future_start(merge(WEFT_BLOCKING, WEFT_CPU, k == 0), nap, c_loc(token), f)
    call check(rc == 0 .and. c_associated(f), "weft_future_start")
    rc = weft_future_get(f, -1_c_int64_t, res)
    call check(rc == 0 .and. c_associated(res, c_loc(token)), "weft_future_get's result")
    call check(logical(weft_future_done(f)), "weft_future_done")
    call weft_future_free(f)
  end do
  rc = weft_future_start(WEFT_BLOCKING, nap, c_null_ptr, f)
  rc = weft_future_get(f, 0_c_int64_t)
  call check(rc == -110 .or. rc == 0, "a deadline of 0")
  call check(weft_future_get(f, -1_c_int64_t) == 0, "then waiting for ever")
  call weft_future_free(f)

  ! Sleeping, never early; the clock; messages.
  t0 = weft_now_ns()
  call check(weft_sleep_ns(5000000_c_int64_t) == 0, "weft_sleep_ns")
  call check(weft_now_ns() - t0 >= 5000000_c_int64_t, "a sleep is never early")
  call check(weft_sleep_ns(-1_c_int64_t) == -22, "a negative sleep is -EINVAL")
  call check(weft_strerror(0) == "success", "weft_strerror(0)")
  call check(weft_strerror(-110) == "deadline passed", "weft_strerror(-ETIMEDOUT)")
  call check(.not. logical(weft_in_fiber()), "the main program is not a fiber")

  call weft_shutdown()
  call check(weft_carrier_count() == 0, "no carrier after weft_shutdown")
  print '(a)', "fortran: all checks passed"

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(a, a)', "fortran: FAILED: ", what
      error stop 1
    end if
  end subroutine check

  subroutine check_all()
    integer(c_size_t) :: i
    call check(all(runs == 1), "every index ran exactly once")
    do i = 1, n
      if (x(i) /= int(i - 1, c_int64_t)**2) then
        print '(a, i0)', "fortran: wrong result at index ", i - 1
        error stop 1
      end if
    end do
  end subroutine check_all

end program test_fortran
