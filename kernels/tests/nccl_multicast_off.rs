//! NVLink multicast (NVLS) stays off for every NCCL communicator `kernels`
//! creates: before its first NCCL call it sets `NCCL_NVLS_ENABLE=0` when the
//! process left it unset, and it refuses a process that asked for multicast.
//! One test in its own binary: it changes this process's environment.

use kernels::raw::{NVLS_ENV, multicast_off};

#[test]
fn nccl_never_gets_nvlink_multicast() {
    // SAFETY: the only test of this binary; nothing else reads the
    // environment meanwhile.
    unsafe { std::env::remove_var(NVLS_ENV) };
    multicast_off().expect("an unset variable is set, not refused");
    assert_eq!(std::env::var(NVLS_ENV).as_deref(), Ok("0"));
    // Already 0: accepted and left alone.
    multicast_off().expect("0 is accepted");
    assert_eq!(std::env::var(NVLS_ENV).as_deref(), Ok("0"));
    // A process that asks for multicast is refused, by name.
    unsafe { std::env::set_var(NVLS_ENV, "1") };
    let refused = multicast_off().expect_err("multicast is refused");
    assert_eq!(
        refused.to_string(),
        "unsupported: NCCL_NVLS_ENABLE=1: kernels never lets NCCL use NVLink multicast (NVLS); \
         unset NCCL_NVLS_ENABLE or set it to 0"
    );
    unsafe { std::env::set_var(NVLS_ENV, "0") };
}
