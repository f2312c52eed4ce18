!> Strings across the C boundary for the ptdp module: C strings the library returns become
!> Fortran strings, Fortran strings become NUL-terminated arguments.
module ptdp_util
  use, intrinsic :: iso_c_binding, only: c_char, c_null_char, c_ptr, c_size_t, c_associated, &
      c_f_pointer
  use ptdp, only: ptdp_last_error, ptdp_status_string
  implicit none
  private
  public :: ptdp_string, ptdp_c_string, ptdp_error_message, ptdp_status_message

  interface
    ! The C library's strlen, to size a returned C string.
    function c_strlen(s) bind(c, name="strlen")
      import :: c_ptr, c_size_t
      implicit none
      type(c_ptr), value :: s
      integer(c_size_t) :: c_strlen
    end function c_strlen
  end interface

contains

  !> A copy of a NUL-terminated C string; "" for a NULL pointer.
  function ptdp_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(p)) then
      s = ""
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function ptdp_string

  !> A Fortran string (trailing blanks dropped) as a NUL-terminated C string argument.
  function ptdp_c_string(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=:), allocatable :: c
    c = trim(s) // c_null_char
  end function ptdp_c_string

  !> The calling thread's message about its last failed ptdp call.
  function ptdp_error_message() result(s)
    character(len=:), allocatable :: s
    s = ptdp_string(ptdp_last_error())
  end function ptdp_error_message

  !> A status in words, e.g. "invalid argument".
  function ptdp_status_message(status) result(s)
    integer, intent(in) :: status
    character(len=:), allocatable :: s
    s = ptdp_string(ptdp_status_string(status))
  end function ptdp_status_message

end module ptdp_util
