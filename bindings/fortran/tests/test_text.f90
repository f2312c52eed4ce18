!> Text through the Fortran bindings: a ByteLevel tokenizer (no files) encodes "hello" to its
!> bytes and decodes them back under the count/capacity protocol, bad arguments return
!> PTDP_ERR_INVALID_ARGUMENT with the library's message, and ptdp_eod_masks gives Megatron's
!> masks of a tiny batch.
program test_text
  use, intrinsic :: iso_c_binding
  use ptdp
  use ptdp_util
  implicit none
  integer :: failures = 0
  integer(c_int) :: st, tok_type
  type(c_ptr) :: tok = c_null_ptr, bad = c_null_ptr
  type(ptdp_tokenizer_options) :: topts
  integer(c_int32_t) :: ids(16), id
  integer(c_size_t) :: count, length
  integer(c_int64_t) :: vocab
  character(kind=c_char, len=32) :: text
  character(len=:), allocatable :: message
  ! Two samples of 4 tokens, one per column (ptdp's [count, seq_length] row-major), end of
  ! document 0: "0 | 5 0 | 7" and "3 0 | 4 4".
  integer(c_int32_t) :: tokens(4, 2), labels(4, 2), positions(4, 2), starts(4, 2)

  ! A ByteLevel tokenizer: the default options, no files.
  st = ptdp_tokenizer_options_init(topts)
  call expect(topts%struct_size == c_sizeof(topts), 'ptdp_tokenizer_options layout')
  call expect(topts%type == PTDP_TOKENIZER_BYTE_LEVEL, 'ByteLevel by default')
  st = ptdp_tokenizer_create(topts, tok)
  call expect(st == PTDP_SUCCESS .and. c_associated(tok), 'tokenizer_create: ' // ptdp_error_message())
  st = ptdp_tokenizer_get_type(tok, tok_type)
  call expect(st == PTDP_SUCCESS .and. tok_type == PTDP_TOKENIZER_BYTE_LEVEL, 'get_type')
  st = ptdp_tokenizer_vocab_size(tok, vocab)
  call expect(st == PTDP_SUCCESS .and. vocab == 256, 'vocab_size 256')
  st = ptdp_tokenizer_eod(tok, id)
  call expect(st == PTDP_SUCCESS .and. id == -1, 'no end-of-document id')

  ! The ids of "hello" are its bytes.
  ids = -7
  st = ptdp_tokenizer_encode(tok, 'hello', 5_c_size_t, ids, size(ids, kind=c_size_t), count)
  call expect(st == PTDP_SUCCESS, 'encode: ' // ptdp_error_message())
  call expect(count == 5, 'five ids')
  call expect(all(ids(1:5) == [104, 101, 108, 108, 111]), 'the ids are the bytes of "hello"')
  call expect(ids(6) == -7, 'nothing written past the ids')
  st = ptdp_tokenizer_token_to_id(tok, 'h', 1_c_size_t, id)
  call expect(st == PTDP_SUCCESS .and. id == 104, 'token_to_id("h")')

  ! Too small a capacity: refused, the count still reported, nothing written.
  ids(6:) = -7
  st = ptdp_tokenizer_encode(tok, 'hello world', 11_c_size_t, ids(6:), 3_c_size_t, count)
  message = ptdp_error_message()
  call expect(st == PTDP_ERR_INVALID_ARGUMENT, 'encode into 3 ids: invalid argument')
  call expect(count == 11, 'the count is reported when there is no room')
  call expect(index(message, 'capacity = 3') > 0, 'the message names the capacity: ' // message)
  call expect(all(ids(6:) == -7), 'nothing written without room')

  ! Decode back: the text and a NUL.
  text = repeat('x', len(text))
  st = ptdp_tokenizer_decode(tok, ids, 5_c_size_t, text, len(text, kind=c_size_t), length)
  call expect(st == PTDP_SUCCESS, 'decode: ' // ptdp_error_message())
  call expect(length == 5 .and. text(1:5) == 'hello' .and. text(6:6) == c_null_char, 'decode gives "hello"')
  st = ptdp_tokenizer_decode(tok, ids, 5_c_size_t, text, 5_c_size_t, length)
  call expect(st == PTDP_ERR_INVALID_ARGUMENT .and. length == 5, 'no room for the NUL: refused, length reported')

  ! Bad arguments: an id outside the vocabulary, an unknown type; named in the message.
  st = ptdp_tokenizer_id_to_token(tok, 256_c_int32_t, text, len(text, kind=c_size_t), length)
  message = ptdp_error_message()
  print '(a, i0, 2a)', 'id 256: status ', st, ': ', message
  call expect(st == PTDP_ERR_INVALID_ARGUMENT, 'id_to_token(256): invalid argument')
  call expect(index(message, '256') > 0, 'the message names the id')
  topts%type = 9
  st = ptdp_tokenizer_create(topts, bad)
  message = ptdp_error_message()
  print '(a, i0, 2a)', 'type 9: status ', st, ': ', message
  call expect(st == PTDP_ERR_INVALID_ARGUMENT, 'an unknown tokenizer type: invalid argument')
  call expect(index(message, 'options->type = 9') > 0, 'the message names the type')
  call expect(.not. c_associated(bad), 'no handle on error')
  st = ptdp_tokenizer_destroy(tok)
  call expect(st == PTDP_SUCCESS, 'tokenizer_destroy')

  ! Megatron's masks: labels is read and written (intent(inout)), the labels of other tokens
  ! keep their values.
  tokens = reshape([0, 5, 0, 7, 3, 0, 4, 4], [4, 2])
  labels = reshape([5, 0, 7, 9, 0, 4, 4, 1], [4, 2])
  positions = -1
  starts = -1
  st = ptdp_eod_masks(tokens, 2_c_int64_t, 4_c_int32_t, 0_c_int32_t, &
                      ior(ior(PTDP_EOD_MASK_LOSS, PTDP_EOD_RESET_POSITION_IDS), PTDP_EOD_RESET_ATTENTION_MASK), &
                      labels, positions, starts)
  call expect(st == PTDP_SUCCESS, 'eod_masks: ' // ptdp_error_message())
  call expect(all(labels == reshape([PTDP_IGNORE_INDEX, 0, PTDP_IGNORE_INDEX, 9, 0, PTDP_IGNORE_INDEX, 4, 1], &
                                    [4, 2])), 'labels of end-of-document tokens are ignored')
  call expect(all(positions == reshape([0, 0, 1, 0, 0, 1, 0, 1], [4, 2])), 'positions restart after each end')
  call expect(all(starts == reshape([0, 1, 1, 3, 0, 0, 2, 2], [4, 2])), 'document starts')
  st = ptdp_eod_masks(tokens, 2_c_int64_t, 0_c_int32_t, 0_c_int32_t, PTDP_EOD_RESET_POSITION_IDS, &
                      labels, positions, starts)
  message = ptdp_error_message()
  call expect(st == PTDP_ERR_INVALID_ARGUMENT .and. index(message, 'seq_length') > 0, &
              'seq_length 0 is refused by name: ' // message)
  call expect(all(positions == reshape([0, 0, 1, 0, 0, 1, 0, 1], [4, 2])), 'nothing written on error')

  if (failures > 0) then
    print '(i0, a)', failures, ' check(s) failed'
    error stop 1
  end if
  print '(a)', 'all Fortran text checks passed'

contains

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(2a)', 'FAILED: ', what
      failures = failures + 1
    end if
  end subroutine expect

end program test_text
