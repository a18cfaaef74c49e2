! Test "fortran_mpi" (under mpirun -np 4): weft_mpi_pmap from Fortran, with
! mpi_f08's communicator, both schedules and both kinds, results on the root
! and on every rank; every result is checked. The ranks agree on the exit
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
  integer :: provided, rank, failures, total, sch, kind, root
  integer(c_int) :: rc
  integer(c_size_t) :: i

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

  call MPI_Allreduce(failures, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) print '(a, i0, a)', "fortran_mpi: ", total, " failures"
  call weft_shutdown()
  call MPI_Finalize()
  if (total /= 0) error stop 1
end program test_fortran_mpi
