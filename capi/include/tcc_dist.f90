! tcc_dist: the Fortran interface of libtcc_dist (see tcc_dist.h for the
! meaning of every function). Handles are type(c_ptr); tensor numbers, tile
! numbers, starts and extents are 0-based, as in C; a tile's box is stored
! row-major (the last index fastest), and so are the dense arrays of
! tcc_dist_pack_dense / tcc_dist_unpack_dense: pass a Fortran array with its
! dimensions reversed (A(k, i) for a tensor A[i,k]). Written next to every `tcc build --mpi`
! library; the library's own module (use LIB) has the open functions, which take
! the communicator as a Fortran integer handle (e.g. MPI_COMM_WORLD).
module tcc_dist
  use iso_c_binding
  implicit none
  interface
    function tcc_dist_rank(h) bind(C, name="tcc_dist_rank")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: h
      integer(c_int64_t) :: tcc_dist_rank
    end function
    function tcc_dist_size(h) bind(C, name="tcc_dist_size")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: h
      integer(c_int64_t) :: tcc_dist_size
    end function
    function tcc_dist_tensor_c(h, name) bind(C, name="tcc_dist_tensor")
      import :: c_ptr, c_int64_t, c_char
      type(c_ptr), value :: h
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int64_t) :: tcc_dist_tensor_c
    end function
    function tcc_dist_is_output(h, t) bind(C, name="tcc_dist_is_output")
      import :: c_ptr, c_int64_t, c_int
      type(c_ptr), value :: h
      integer(c_int64_t), value :: t
      integer(c_int) :: tcc_dist_is_output
    end function
    function tcc_dist_ndims(h, t) bind(C, name="tcc_dist_ndims")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: h
      integer(c_int64_t), value :: t
      integer(c_int64_t) :: tcc_dist_ndims
    end function
    function tcc_dist_extent(h, t, d) bind(C, name="tcc_dist_extent")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: h
      integer(c_int64_t), value :: t, d
      integer(c_int64_t) :: tcc_dist_extent
    end function
    function tcc_dist_local_tiles(h, t) bind(C, name="tcc_dist_local_tiles")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: h
      integer(c_int64_t), value :: t
      integer(c_int64_t) :: tcc_dist_local_tiles
    end function
    function tcc_dist_local_len(h, t) bind(C, name="tcc_dist_local_len")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: h
      integer(c_int64_t), value :: t
      integer(c_int64_t) :: tcc_dist_local_len
    end function
    function tcc_dist_tile(h, t, i, start, extent) bind(C, name="tcc_dist_tile")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: h
      integer(c_int64_t), value :: t, i
      integer(c_int64_t), dimension(*), intent(out) :: start, extent
      integer(c_int64_t) :: tcc_dist_tile
    end function
    function tcc_dist_local_data(h, t) bind(C, name="tcc_dist_local_data")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: h
      integer(c_int64_t), value :: t
      type(c_ptr) :: tcc_dist_local_data
    end function
    function tcc_dist_pack_dense(h, t, dense, len) bind(C, name="tcc_dist_pack_dense")
      import :: c_ptr, c_int64_t, c_int, c_double
      type(c_ptr), value :: h
      integer(c_int64_t), value :: t, len
      real(c_double), dimension(*), intent(in) :: dense
      integer(c_int) :: tcc_dist_pack_dense
    end function
    function tcc_dist_unpack_dense(h, t, dense, len) bind(C, name="tcc_dist_unpack_dense")
      import :: c_ptr, c_int64_t, c_int, c_double
      type(c_ptr), value :: h
      integer(c_int64_t), value :: t, len
      real(c_double), dimension(*), intent(inout) :: dense
      integer(c_int) :: tcc_dist_unpack_dense
    end function
    function tcc_dist_read_npy_c(h, t, path) bind(C, name="tcc_dist_read_npy")
      import :: c_ptr, c_int64_t, c_int, c_char
      type(c_ptr), value :: h
      integer(c_int64_t), value :: t
      character(kind=c_char), dimension(*), intent(in) :: path
      integer(c_int) :: tcc_dist_read_npy_c
    end function
    function tcc_dist_run(h) bind(C, name="tcc_dist_run")
      import :: c_ptr, c_int
      type(c_ptr), value :: h
      integer(c_int) :: tcc_dist_run
    end function
    subroutine tcc_dist_close(h) bind(C, name="tcc_dist_close")
      import :: c_ptr
      type(c_ptr), value :: h
    end subroutine
    function tcc_dist_last_error_c() bind(C, name="tcc_dist_last_error")
      import :: c_ptr
      type(c_ptr) :: tcc_dist_last_error_c
    end function
  end interface
contains
  ! An input's or output's number by name, or -1.
  function tcc_dist_tensor(h, name) result(t)
    type(c_ptr), intent(in) :: h
    character(len=*), intent(in) :: name
    integer(c_int64_t) :: t
    t = tcc_dist_tensor_c(h, trim(name) // c_null_char)
  end function
  ! Fills this rank's tiles of input t from a .npy file of the whole tensor
  ! (collective; 0 on success, see tcc_dist_read_npy in tcc_dist.h).
  function tcc_dist_read_npy(h, t, path) result(rc)
    type(c_ptr), intent(in) :: h
    integer(c_int64_t), intent(in) :: t
    character(len=*), intent(in) :: path
    integer(c_int) :: rc
    rc = tcc_dist_read_npy_c(h, t, trim(path) // c_null_char)
  end function
  ! This rank's buffer of tensor t as a Fortran array (local_len elements).
  subroutine tcc_dist_data(h, t, data)
    type(c_ptr), intent(in) :: h
    integer(c_int64_t), intent(in) :: t
    real(c_double), pointer, intent(out) :: data(:)
    call c_f_pointer(tcc_dist_local_data(h, t), data, [tcc_dist_local_len(h, t)])
  end subroutine
  ! The last error of this thread.
  function tcc_dist_error() result(msg)
    character(len=:), allocatable :: msg
    character(kind=c_char), pointer :: chars(:)
    integer :: n, i
    call c_f_pointer(tcc_dist_last_error_c(), chars, [65536])
    n = 0
    do
      if (chars(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate(character(len=n) :: msg)
    do i = 1, n
      msg(i:i) = chars(i)
    end do
  end function
end module tcc_dist
