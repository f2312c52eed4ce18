//! A bad argument comes back as Err with the C status and the library's message.
use ptdp::sys;
use ptdp::{Defaults, Error, Schedule, Tensor, TrainConfig};

#[test]
fn bad_shape_is_an_error_with_the_library_message() {
    let err: Error = Tensor::from_slice::<f32>(&[2, -3], &[])
        .err()
        .expect("a negative extent must fail");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert_eq!(err.status_string(), "invalid argument");
    assert!(
        err.message().contains("ptdp_tensor_create"),
        "message: {}",
        err.message()
    );
    assert!(err.to_string().starts_with("invalid argument: "), "{err}");
}

#[test]
fn bad_schedule_and_flag_are_errors() {
    let err = Schedule::new(sys::PTDP_SCHEDULE_1F1B, 0, 4, 1)
        .err()
        .expect("p = 0 must fail");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert!(!err.message().is_empty());

    let err = TrainConfig::parse(&["ptdp-train", "--no-such-flag"])
        .err()
        .expect("an unknown flag must fail");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert!(err.message().contains("--no-such-flag"), "message: {}", err.message());
}

#[test]
fn tensors_round_trip_and_check_their_dtype() -> ptdp::Result<()> {
    let t = Tensor::from_slice(&[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
    assert_eq!(t.shape()?, vec![2, 3]);
    assert_eq!(t.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let bf16 = t.cast(sys::PTDP_DTYPE_BF16)?;
    assert_eq!(bf16.dtype()?, sys::PTDP_DTYPE_BF16);
    let err = t.to_vec::<i32>().expect_err("reading f32 as i32 must fail");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    let zeros = Tensor::zeros(&[4], &ptdp::TensorOptions::defaults())?;
    zeros.fill(2.5)?;
    assert_eq!(zeros.to_vec::<f32>()?, vec![2.5; 4]);
    Ok(())
}

#[test]
fn version_matches_the_header() {
    let want = format!(
        "{}.{}.{}",
        sys::PTDP_VERSION_MAJOR,
        sys::PTDP_VERSION_MINOR,
        sys::PTDP_VERSION_PATCH
    );
    assert!(ptdp::version().starts_with(&want), "{} vs {want}", ptdp::version());
}

#[test]
fn cpu_threads_are_read_back_and_a_negative_count_refused() -> ptdp::Result<()> {
    let mut ro = ptdp::RuntimeOptions::defaults();
    ro.use_mpi = 0;
    ro.cpu_threads = 2;
    let runtime = ptdp::Runtime::new(&ro)?;
    assert_eq!(runtime.cpu_threads()?, 2);
    drop(runtime);
    ro.cpu_threads = -1;
    let err = ptdp::Runtime::new(&ro).err().expect("a negative count must fail");
    assert_eq!(err.status(), sys::PTDP_ERR_INVALID_ARGUMENT);
    assert!(err.message().contains("options->cpu_threads = -1"), "message: {}", err.message());
    Ok(())
}
