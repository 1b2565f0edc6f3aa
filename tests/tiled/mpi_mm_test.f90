! The Fortran twin of mpi_mm_test.c: calls the library that
! `tcc build --mpi tests/tiled/mpi_mm.tc -o libmm.so` builds, filling the input
! tiles each rank owns and checking the output tiles it owns. Prints "ok" on
! rank 0 and stops with code 0 when everything holds. Preprocessed (-cpp):
! with -DTCC_SIZED the library has run-time sizes (mpi_mm_sized.tc), passed to
! the open function by keyword.
program mpi_mm_test
  use mpi
  use iso_c_binding
  use tcc_dist
  use mm
  implicit none
  integer, parameter :: n = 10, m = 7
  integer :: ierr, rank, bad, allbad
  integer(c_int64_t) :: count_c, total_c
  real(c_double) :: err
  type(c_ptr) :: h

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
#ifdef TCC_SIZED
  h = tcc_mm_main_open_f(size_n=int(n, c_size_t), size_m=int(m, c_size_t), comm=int(MPI_COMM_WORLD, c_int))
#else
  h = tcc_mm_main_open_f(int(MPI_COMM_WORLD, c_int))
#endif
  if (.not. c_associated(h)) then
    print *, "open failed: ", tcc_dist_error()
    call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
  end if
  bad = 0
  if (tcc_dist_rank(h) /= rank) bad = ior(bad, 1)
  ! (Two statements: Fortran may evaluate the operands of .or. in any order.)
  if (tcc_dist_tensor(h, "nope") /= -1) bad = ior(bad, 2)
  if (len(tcc_dist_error()) == 0) bad = ior(bad, 2)
  err = 0
  count_c = walk("A", 1, .true.) + walk("B", 2, .true.) + walk("S", 3, .true.)
  if (tcc_dist_run(h) /= 0) then
    print *, "run failed: ", tcc_dist_error()
    bad = ior(bad, 4)
  end if
  count_c = walk("C", 4, .false.)
  if (walk("E", 5, .false.) < 0 .or. count_c < 0 .or. err > 1d-12) bad = ior(bad, 8)
  call MPI_Reduce(count_c, total_c, 1, MPI_INTEGER8, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. total_c /= n * n) bad = ior(bad, 16)
  call tcc_dist_close(h)
  call MPI_Reduce(bad, allbad, 1, MPI_INTEGER, MPI_BOR, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (allbad == 0) then
      print "(a)", "ok"
    else
      print *, "failed:", allbad, total_c, err
    end if
  end if
  call MPI_Finalize(ierr)
  if (rank == 0 .and. allbad /= 0) stop 1

contains

  real(c_double) function value(which, i, j)
    integer, intent(in) :: which
    integer(c_int64_t), intent(in) :: i, j
    integer(c_int64_t) :: k
    select case (which)
    case (1)
      value = sin(0.3d0 * i + 0.7d0 * j)
    case (2)
      value = cos(0.2d0 * i - 0.5d0 * j)
    case (3)
      value = 0.1d0 * min(i, j) + 0.01d0 * max(i, j)
    case (4)
      value = 0.5d0 * (0.1d0 * min(i, j) + 0.01d0 * max(i, j))
      do k = 0, m - 1
        value = value + sin(0.3d0 * i + 0.7d0 * k) * cos(0.2d0 * k - 0.5d0 * j)
      end do
    case default
      value = 0
      do k = 0, m - 1
        value = value + sin(0.3d0 * i + 0.7d0 * k) * sin(0.3d0 * j + 0.7d0 * k)
      end do
    end select
  end function

  ! Fills (or checks) every local tile of `name`; returns the elements visited.
  integer(c_int64_t) function walk(name, which, fill)
    character(len=*), intent(in) :: name
    integer, intent(in) :: which
    logical, intent(in) :: fill
    integer(c_int64_t) :: t, x, off, a, b, start(2), ext(2)
    real(c_double), pointer :: d(:)
    t = tcc_dist_tensor(h, name)
    walk = -1
    if (t < 0) return
    walk = 0
    if (tcc_dist_local_len(h, t) == 0) return
    call tcc_dist_data(h, t, d)
    do x = 0, tcc_dist_local_tiles(h, t) - 1
      off = tcc_dist_tile(h, t, x, start, ext)
      do a = 0, ext(1) - 1
        do b = 0, ext(2) - 1
          if (fill) then
            d(off + a * ext(2) + b + 1) = value(which, start(1) + a, start(2) + b)
          else
            err = max(err, abs(d(off + a * ext(2) + b + 1) - value(which, start(1) + a, start(2) + b)))
          end if
          walk = walk + 1
        end do
      end do
    end do
  end function
end program
