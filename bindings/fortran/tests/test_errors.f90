!> The Fortran bindings: a bad argument returns its status and the library's message, the
!> bind(c) types have the C layout, and data round-trips through a tensor.
program test_errors
  use, intrinsic :: iso_c_binding
  use ptdp
  use ptdp_util
  implicit none
  integer :: failures = 0
  integer(c_int) :: st
  type(c_ptr) :: tensor = c_null_ptr, schedule = c_null_ptr
  type(ptdp_tensor_options) :: topts
  type(ptdp_runtime_options) :: ropts
  type(ptdp_parallel_options) :: popts
  type(ptdp_gpt_options) :: gopts
  type(ptdp_pipeline_options) :: pipe
  type(ptdp_stage_callbacks) :: callbacks
  type(ptdp_optimizer_options) :: oopts
  type(ptdp_gpt_data_options) :: dopts
  type(ptdp_generate_options) :: genopts
  type(ptdp_schedule_costs) :: costs
  type(ptdp_checkpoint_state) :: ckpt
  integer(c_int64_t) :: shape(2), dims(PTDP_MAX_DIMS)
  integer(c_int32_t) :: ndim
  real(c_float), target :: values(6), back(6)
  character(len=:), allocatable :: message

  ! A negative extent: PTDP_ERR_INVALID_ARGUMENT, a message naming the call, no handle.
  st = ptdp_tensor_options_init(topts)
  shape = [2_c_int64_t, -3_c_int64_t]
  st = ptdp_tensor_create(topts, 2, shape, c_null_ptr, 0_c_size_t, tensor)
  message = ptdp_error_message()
  print '(a, i0, 4a)', 'bad shape: status ', st, ' (', ptdp_status_message(st), '): ', message
  call expect(st == PTDP_ERR_INVALID_ARGUMENT, 'status of a negative extent')
  call expect(index(message, 'ptdp_tensor_create') > 0, 'message names ptdp_tensor_create')
  call expect(.not. c_associated(tensor), 'no handle on error')

  st = ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 0, 4, 1, schedule)
  print '(a, i0, 2a)', 'p = 0: status ', st, ': ', ptdp_error_message()
  call expect(st == PTDP_ERR_INVALID_ARGUMENT, 'status of p = 0')

  ! Each init function stores sizeof(C struct): it must equal the bind(c) type's size.
  st = ptdp_runtime_options_init(ropts)
  st = ptdp_parallel_options_init(popts)
  st = ptdp_gpt_options_init(gopts)
  st = ptdp_pipeline_options_init(pipe)
  st = ptdp_stage_callbacks_init(callbacks)
  st = ptdp_optimizer_options_init(oopts)
  st = ptdp_gpt_data_options_init(dopts)
  st = ptdp_generate_options_init(genopts)
  st = ptdp_schedule_costs_init(costs)
  st = ptdp_checkpoint_state_init(ckpt)
  call expect(topts%struct_size == c_sizeof(topts), 'ptdp_tensor_options layout')
  call expect(ropts%struct_size == c_sizeof(ropts), 'ptdp_runtime_options layout')
  call expect(popts%struct_size == c_sizeof(popts), 'ptdp_parallel_options layout')
  call expect(gopts%struct_size == c_sizeof(gopts), 'ptdp_gpt_options layout')
  call expect(pipe%struct_size == c_sizeof(pipe), 'ptdp_pipeline_options layout')
  call expect(callbacks%struct_size == c_sizeof(callbacks), 'ptdp_stage_callbacks layout')
  call expect(oopts%struct_size == c_sizeof(oopts), 'ptdp_optimizer_options layout')
  call expect(dopts%struct_size == c_sizeof(dopts), 'ptdp_gpt_data_options layout')
  call expect(genopts%struct_size == c_sizeof(genopts), 'ptdp_generate_options layout')
  call expect(costs%struct_size == c_sizeof(costs), 'ptdp_schedule_costs layout')
  call expect(ckpt%struct_size == c_sizeof(ckpt), 'ptdp_checkpoint_state layout')
  call expect(gopts%seed == 1234 .and. dopts%num_samples(3) == 0, 'documented defaults')

  ! A tensor round trip: host data goes in through c_loc.
  values = [1.0, 2.5, -3.25, 0.5, 1e-3, 4.0]
  shape = [2_c_int64_t, 3_c_int64_t]
  st = ptdp_tensor_create(topts, 2, shape, c_loc(values), c_sizeof(values), tensor)
  call expect(st == PTDP_SUCCESS, 'tensor_create: ' // ptdp_error_message())
  st = ptdp_tensor_ndim(tensor, ndim)
  st = ptdp_tensor_shape(tensor, dims, PTDP_MAX_DIMS)
  call expect(ndim == 2 .and. dims(1) == 2 .and. dims(2) == 3, 'shape [2, 3]')
  st = ptdp_tensor_copy_to_host(tensor, c_loc(back), c_sizeof(back))
  call expect(all(abs(back - values) < 1e-6), 'values round-trip')
  st = ptdp_tensor_copy_to_host(tensor, c_loc(back), 4_c_size_t)
  call expect(st == PTDP_ERR_INVALID_ARGUMENT, 'too small a host buffer: ' // ptdp_error_message())
  st = ptdp_tensor_destroy(tensor)
  call expect(ptdp_string(ptdp_version()) /= '', 'version string')

  if (failures > 0) then
    print '(i0, a)', failures, ' check(s) failed'
    error stop 1
  end if
  print '(a)', 'all Fortran binding checks passed'

contains

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(2a)', 'FAILED: ', what
      failures = failures + 1
    end if
  end subroutine expect

end program test_errors
