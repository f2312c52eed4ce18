!> ptdp-train in Fortran: the library's training loop, the one every front end shares, so the
!> same flags print the same log lines and write the same checkpoints as the C tool.
!>   mpirun -np 4 ptdp_sample_fortran_ptdp_train --tensor-model-parallel-size 2 --num-layers 4 ...
program ptdp_train
  use, intrinsic :: iso_c_binding
  use ptdp
  use ptdp_util
  implicit none
  ! Every argument NUL-terminated, one after the other, in one interoperable character array;
  ! argv points at the start of each.
  character(kind=c_char), allocatable, target :: chars(:)
  type(c_ptr), allocatable :: argv(:)
  integer, allocatable :: start(:)
  character(len=:), allocatable :: arg
  integer :: i, j, n, length, total
  integer(c_int32_t) :: exit_code

  n = command_argument_count()
  allocate(start(0:n), argv(0:n))
  total = 0
  do i = 0, n
    call get_command_argument(i, length=length)
    start(i) = total + 1
    total = total + length + 1
  end do
  allocate(chars(total))
  do i = 0, n
    call get_command_argument(i, length=length)
    allocate(character(len=length) :: arg)
    call get_command_argument(i, arg)
    do j = 1, length
      chars(start(i) + j - 1) = arg(j:j)
    end do
    chars(start(i) + length) = c_null_char
    deallocate(arg)
    argv(i) = c_loc(chars(start(i)))
  end do
  exit_code = 1
  if (ptdp_train_main(int(n + 1, c_int32_t), argv, exit_code) /= PTDP_SUCCESS) then
    write (*, '(a)') 'ptdp-train: ' // ptdp_error_message()
    exit_code = 1
  end if
  stop int(exit_code), quiet=.true.
end program ptdp_train
