# Tri-state options (AUTO|ON|OFF) and the project's warning flags.

# ptdp_tristate(NAME DOC): declares a cache option NAME that is AUTO, ON or OFF and normalises
# the usual CMake spellings of true and false.
function(ptdp_tristate name doc)
  set(${name} AUTO CACHE STRING "${doc} (AUTO, ON or OFF)")
  set_property(CACHE ${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${name}}" _v)
  if(_v MATCHES "^(ON|TRUE|YES|Y|1)$")
    set(_v ON)
  elseif(_v MATCHES "^(OFF|FALSE|NO|N|0)$")
    set(_v OFF)
  elseif(NOT _v STREQUAL "AUTO")
    message(FATAL_ERROR "${name} must be AUTO, ON or OFF; got '${${name}}'")
  endif()
  set(${name} ${_v} PARENT_SCOPE)
endfunction()

ptdp_tristate(PTDP_WITH_CUDA "Build the CUDA engine (kernels, cuBLASLt)")
ptdp_tristate(PTDP_WITH_NCCL "Use NCCL for GPU communication (needs CUDA)")
ptdp_tristate(PTDP_WITH_MPI "Use MPI between ranks")
set(PTDP_CUDA_ARCHITECTURES "90-real;90-virtual" CACHE STRING
    "CUDA architectures (default: sm_90 code plus compute_90 PTX)")

# -Wall -Wextra -Werror on the project's own code, whatever the language.
function(ptdp_project_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror --Werror=all-warnings>)
endfunction()
