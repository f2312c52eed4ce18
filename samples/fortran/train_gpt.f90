!> A tiny GPT trained from Fortran over the caller's own MPI communicator: each of the ranks
!> of MPI_COMM_WORLD becomes one pipeline stage, and the 1F1B schedule runs the batches.
!> Run with `mpirun -np 2 ptdp_sample_fortran_train_gpt`.
program train_gpt
  use, intrinsic :: iso_c_binding
  use mpi
  use ptdp
  use ptdp_util
  implicit none
  integer, parameter :: vocab = 32, seq = 16, micro_batch = 2, iterations = 40
  integer :: ierr, rank, nranks, m, it, s, i, start
  type(c_ptr) :: runtime = c_null_ptr, groups = c_null_ptr, model = c_null_ptr
  type(c_ptr) :: optimizer = c_null_ptr, schedule = c_null_ptr
  type(ptdp_runtime_options) :: ropts
  type(ptdp_parallel_options) :: popts
  type(ptdp_gpt_options) :: gopts
  type(ptdp_optimizer_options) :: oopts
  type(ptdp_pipeline_options) :: pipe
  type(ptdp_iteration_result) :: result
  integer(c_int32_t), allocatable :: tokens(:), labels(:)
  real :: first_loss = 0

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)

  ! The library duplicates our communicator (handed over as Fortran's integer handle) and
  ! never finalises MPI: that stays our job.
  call check(ptdp_runtime_options_init(ropts), 'runtime options')
  call check(ptdp_runtime_create_from_fortran(ropts, int(MPI_COMM_WORLD, c_int32_t), runtime), &
      'ptdp_runtime_create_from_fortran')

  ! Layout: t = 1, p = every rank, d = 1.
  call check(ptdp_parallel_options_init(popts), 'parallel options')
  popts%pipeline_model_parallel_size = nranks
  call check(ptdp_groups_create(runtime, popts, groups), 'ptdp_groups_create')

  ! A small GPT without dropout, so that the loss falls quickly and steadily.
  call check(ptdp_gpt_options_init(gopts), 'gpt options')
  gopts%num_layers = 2
  gopts%hidden_size = 32
  gopts%num_attention_heads = 4
  gopts%vocab_size = vocab
  gopts%seq_length = seq
  gopts%hidden_dropout = 0
  gopts%attention_dropout = 0
  call check(ptdp_model_create(groups, gopts, model), 'ptdp_model_create')

  call check(ptdp_optimizer_options_init(oopts), 'optimizer options')
  oopts%lr = 1e-2_c_double
  call check(ptdp_optimizer_create(model, oopts, optimizer), 'ptdp_optimizer_create')

  m = 2 * nranks  ! microbatches per iteration
  call check(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, nranks, m, 1, schedule), 'ptdp_schedule_create')
  call check(ptdp_pipeline_options_init(pipe), 'pipeline options')

  ! Counting sequences: every label is its token plus one (mod the vocabulary).
  allocate(tokens(m * micro_batch * seq), labels(m * micro_batch * seq))
  do it = 0, iterations - 1
    do s = 0, m * micro_batch - 1
      start = mod(it * 7 + s * 5, vocab)
      do i = 0, seq - 1
        tokens(s * seq + i + 1) = mod(start + i, vocab)
        labels(s * seq + i + 1) = mod(start + i + 1, vocab)
      end do
    end do
    call check(ptdp_train_iteration(model, optimizer, schedule, tokens, labels, micro_batch, &
        int(it, c_int64_t), pipe, result), 'ptdp_train_iteration')
    if (it == 0) first_loss = result%loss
    if (rank == 0 .and. mod(it, 10) == 0) print '(a, i3, a, f8.4)', 'iteration', it, '  loss', result%loss
  end do
  if (rank == 0) print '(a, f7.4, a, f7.4, a, i0, a)', 'loss ', first_loss, ' -> ', result%loss, &
      ' over ', nranks, ' pipeline stage(s)'

  ! Handles are freed in reverse order of creation.
  call check(ptdp_schedule_destroy(schedule), 'schedule')
  call check(ptdp_optimizer_destroy(optimizer), 'optimizer')
  call check(ptdp_model_destroy(model), 'model')
  call check(ptdp_groups_destroy(groups), 'groups')
  call check(ptdp_runtime_destroy(runtime), 'runtime')
  if (result%loss > 0.5 * first_loss) then
    print '(a, i0, a)', 'rank ', rank, ': the loss did not fall enough'
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  call MPI_Finalize(ierr)

contains

  !> Stops every rank on a failed call, printing the library's message.
  subroutine check(status, what)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: what
    integer :: ierr2
    if (status /= PTDP_SUCCESS) then
      print '(a, i0, 5a)', 'rank ', rank, ': ', what, ' failed: ', ptdp_status_message(status) // ': ', &
          ptdp_error_message()
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr2)
    end if
  end subroutine check

end program train_gpt
