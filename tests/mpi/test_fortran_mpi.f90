! Test "fortran_mpi" (under mpirun -np 4): weft_mpi_pmap from Fortran, with
! mpi_f08's communicator, both schedules and both kinds, results on the root
! and on every rank; every result is checked; weft_mpi_pmap_range runs each
! rank's block in global indices; weft_mpi_reduce's sum on every rank. The ranks agree on the exit
! status (MPI_Allreduce of the failures).
module fortran_mpi_test_cb
  use, intrinsic :: iso_c_binding
  implicit none
contains
  ! The result of index i: i**3, as an 8-byte integer.
  integer(c_int) function cube(ctx, i, out) bind(c)
    type(c_ptr), value :: ctx
    integer(c_size_t), value :: i
    type(c_ptr), value :: out
    integer(c_int64_t), pointer :: r
    call c_f_pointer(out, r)
    r = int(i, c_int64_t)**3
    cube = 0
    if (c_associated(ctx)) cube = 0
  end function cube

  ! weft_mpi_pmap_range: res(i + 1) = i**3 on this rank for every global i of [lo, hi).
  integer(c_int) function cube_range(ctx, lo, hi) bind(c)
    type(c_ptr), value :: ctx
    integer(c_size_t), value :: lo, hi
    integer(c_int64_t), pointer :: r(:)
    integer(c_size_t) :: i
    call c_f_pointer(ctx, r, [hi])
    do i = lo + 1, hi
      r(i) = int(i - 1, c_int64_t)**3
    end do
    cube_range = 0
  end function cube_range

  ! weft_mpi_reduce: acc = acc + the sum of i over [lo, hi), as a real (exact: the sums stay below 2**53).
  subroutine sum_leaf(ctx, lo, hi, acc) bind(c)
    type(c_ptr), value :: ctx
    integer(c_size_t), value :: lo, hi
    type(c_ptr), value :: acc
    real(c_double), pointer :: a
    integer(c_size_t) :: i
    call c_f_pointer(acc, a)
    do i = lo, hi - 1
      a = a + real(i, c_double)
    end do
    if (c_associated(ctx)) a = -1.0_c_double
  end subroutine sum_leaf

  subroutine sum_combine(ctx, acc, other) bind(c)
    type(c_ptr), value :: ctx
    type(c_ptr), value :: acc
    type(c_ptr), value :: other
    real(c_double), pointer :: a, b
    call c_f_pointer(acc, a)
    call c_f_pointer(other, b)
    a = a + b
    if (c_associated(ctx)) a = -1.0_c_double
  end subroutine sum_combine
end module fortran_mpi_test_cb

program test_fortran_mpi
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use weft
  use fortran_mpi_test_cb
  implicit none
  integer(c_size_t), parameter :: n = 100000_c_size_t
  integer(c_int64_t), allocatable, target :: res(:)
  type(weft_mpi_pmap_opts) :: o
  integer :: provided, rank, failures, total_f, sch, kind, root
  integer(c_int) :: rc
  integer(c_size_t) :: i, lo, hi, q, r
  real(c_double), target :: zero, total

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  allocate (res(n))
  failures = 0
  do sch = 0, 1
    do kind = 0, 1
      do root = 0, 1
        res = -1
        o = weft_mpi_pmap_opts()
        o%schedule = merge(WEFT_MPI_DYNAMIC, WEFT_MPI_STATIC, sch == 1)
        o%local%kind = merge(WEFT_BLOCKING, WEFT_CPU, kind == 1)
        o%root = merge(WEFT_MPI_ALL, 0, root == 1)
        rc = weft_mpi_pmap(MPI_COMM_WORLD%MPI_VAL, n, 8_c_size_t, cube, c_null_ptr, c_loc(res), o)
        if (rc /= 0) failures = failures + 1
        if (root == 1 .or. rank == 0) then
          do i = 1, n
            if (res(i) /= int(i - 1, c_int64_t)**3) then
              failures = failures + 1
              exit
            end if
          end do
        end if
      end do
    end do
  end do
  ! The defaults (opts absent): STATIC, CPU, results on rank 0.
  res = -1
  rc = weft_mpi_pmap(MPI_COMM_WORLD%MPI_VAL, n, 8_c_size_t, cube, c_null_ptr, c_loc(res))
  if (rc /= 0) failures = failures + 1
  if (rank == 0 .and. any(res /= [(int(i - 1, c_int64_t)**3, i = 1, n)])) failures = failures + 1
  ! A mismatch on one rank: -EINVAL on all.
  rc = weft_mpi_pmap(MPI_COMM_WORLD%MPI_VAL, n + merge(1_c_size_t, 0_c_size_t, rank == 1), 8_c_size_t, cube, &
                     c_null_ptr, c_loc(res))
  if (rc /= -22) failures = failures + 1

  ! weft_mpi_pmap_range: this rank's STATIC block, in global indices; nothing else touched.
  res = -1
  o = weft_mpi_pmap_opts()
  rc = weft_mpi_pmap_range(MPI_COMM_WORLD%MPI_VAL, n, cube_range, c_loc(res), o)
  if (rc /= 0) failures = failures + 1
  call MPI_Comm_size(MPI_COMM_WORLD, sch)
  q = n / int(sch, c_size_t)
  r = mod(n, int(sch, c_size_t))
  lo = q * int(rank, c_size_t) + min(int(rank, c_size_t), r)
  hi = lo + q + merge(1_c_size_t, 0_c_size_t, int(rank, c_size_t) < r)
  do i = 1, n
    if (res(i) /= merge(int(i - 1, c_int64_t)**3, -1_c_int64_t, i > lo .and. i <= hi)) then
      failures = failures + 1
      exit
    end if
  end do
  ! weft_mpi_reduce: the sum of 0 .. n - 1 on every rank.
  zero = 0.0_c_double
  total = -1.0_c_double
  o%root = WEFT_MPI_ALL
  rc = weft_mpi_reduce(MPI_COMM_WORLD%MPI_VAL, n, sum_leaf, sum_combine, c_null_ptr, c_loc(zero), c_loc(total), &
                       8_c_size_t, o)
  if (rc /= 0 .or. abs(total - real(n, c_double) * real(n - 1, c_double) / 2.0_c_double) > 0.5_c_double) &
    failures = failures + 1 ! (exact: a whole number, checked within a half)

  call MPI_Allreduce(failures, total_f, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) print '(a, i0, a)', "fortran_mpi: ", total_f, " failures"
  call weft_shutdown()
  call MPI_Finalize()
  if (total_f /= 0) error stop 1
end program test_fortran_mpi
