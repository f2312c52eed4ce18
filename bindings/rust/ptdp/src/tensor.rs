//! Tensors: host or device buffers with a shape and a dtype.
use crate::error::{check, Error, Result};
use crate::options::{Defaults, TensorOptions};
use crate::sys;
use std::ptr;

/// Rust element types with a ptdp dtype.
pub trait Element: Copy + Default {
    const DTYPE: sys::ptdp_dtype;
}

impl Element for f32 {
    const DTYPE: sys::ptdp_dtype = sys::PTDP_DTYPE_F32;
}
impl Element for i32 {
    const DTYPE: sys::ptdp_dtype = sys::PTDP_DTYPE_I32;
}
impl Element for i64 {
    const DTYPE: sys::ptdp_dtype = sys::PTDP_DTYPE_I64;
}

/// An owned tensor handle, destroyed on drop.
pub struct Tensor {
    raw: sys::ptdp_tensor,
}

impl Tensor {
    /// A CPU tensor of `shape` holding a copy of `data` (row-major).
    pub fn from_slice<T: Element>(shape: &[i64], data: &[T]) -> Result<Tensor> {
        let mut options = TensorOptions::defaults();
        options.dtype = T::DTYPE;
        Self::create(&options, shape, data.as_ptr().cast(), std::mem::size_of_val(data))
    }

    /// A zero-filled tensor.
    pub fn zeros(shape: &[i64], options: &TensorOptions) -> Result<Tensor> {
        Self::create(options, shape, ptr::null(), 0)
    }

    fn create(options: &TensorOptions, shape: &[i64], data: *const std::ffi::c_void, bytes: usize) -> Result<Tensor> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_tensor_create(options, shape.len() as i32, shape.as_ptr(), data, bytes, &mut raw) })?;
        Ok(Tensor { raw })
    }

    /// Takes ownership of a handle from the C API.
    ///
    /// # Safety
    /// `raw` must be a live tensor handle that nothing else destroys.
    pub unsafe fn from_raw(raw: sys::ptdp_tensor) -> Tensor {
        Tensor { raw }
    }

    /// Gives the handle up (e.g. to the library, which then destroys it).
    pub fn into_raw(self) -> sys::ptdp_tensor {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }

    pub fn as_raw(&self) -> sys::ptdp_tensor {
        self.raw
    }

    pub fn shape(&self) -> Result<Vec<i64>> {
        let mut shape = [0i64; sys::PTDP_MAX_DIMS as usize];
        let mut ndim = 0;
        check(unsafe { sys::ptdp_tensor_ndim(self.raw, &mut ndim) })?;
        check(unsafe { sys::ptdp_tensor_shape(self.raw, shape.as_mut_ptr(), shape.len() as i32) })?;
        Ok(shape[..ndim as usize].to_vec())
    }

    pub fn dtype(&self) -> Result<sys::ptdp_dtype> {
        let mut dtype = 0;
        check(unsafe { sys::ptdp_tensor_dtype(self.raw, &mut dtype) })?;
        Ok(dtype)
    }

    pub fn numel(&self) -> Result<i64> {
        let mut numel = 0;
        check(unsafe { sys::ptdp_tensor_numel(self.raw, &mut numel) })?;
        Ok(numel)
    }

    /// The elements, copied to the host; `T` must match the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.expect_dtype::<T>()?;
        let mut out = vec![T::default(); self.numel()? as usize];
        check(unsafe {
            sys::ptdp_tensor_copy_to_host(self.raw, out.as_mut_ptr().cast(), std::mem::size_of_val(&out[..]))
        })?;
        Ok(out)
    }

    /// Overwrites the elements from the host; `T` must match the dtype, `data` the size.
    pub fn copy_from<T: Element>(&self, data: &[T]) -> Result<()> {
        self.expect_dtype::<T>()?;
        check(unsafe { sys::ptdp_tensor_copy_from_host(self.raw, data.as_ptr().cast(), std::mem::size_of_val(data)) })
    }

    /// A new tensor of another dtype.
    pub fn cast(&self, dtype: sys::ptdp_dtype) -> Result<Tensor> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_tensor_cast(self.raw, dtype, &mut raw) })?;
        Ok(Tensor { raw })
    }

    /// Sets every element to `value`.
    pub fn fill(&self, value: f64) -> Result<()> {
        check(unsafe { sys::ptdp_tensor_fill(self.raw, value) })
    }

    fn expect_dtype<T: Element>(&self) -> Result<()> {
        let dtype = self.dtype()?;
        if dtype != T::DTYPE {
            return Err(Error::invalid(format!(
                "tensor of dtype {dtype} read or written as {} (dtype {})",
                std::any::type_name::<T>(),
                T::DTYPE
            )));
        }
        Ok(())
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        unsafe { sys::ptdp_tensor_destroy(self.raw) };
    }
}
