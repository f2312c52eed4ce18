//! Finds libptdp: pkg-config first (the `pkg-config` program; an uninstalled build tree is found
//! through its `ptdp-uninstalled.pc`), then the directory in `PTDP_LIB_DIR`, then the linker's
//! default search path.
use std::env;
use std::process::Command;

fn from_pkg_config() -> bool {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let output = match Command::new(program).args(["--libs", "ptdp"]).output() {
        Ok(output) if output.status.success() => output,
        _ => return false,
    };
    let libs = String::from_utf8_lossy(&output.stdout);
    let mut linked = false;
    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:lib_dir={dir}");
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
            linked |= lib == "ptdp";
        }
    }
    linked
}

fn main() {
    for var in ["PTDP_LIB_DIR", "PKG_CONFIG", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if from_pkg_config() {
        return;
    }
    match env::var("PTDP_LIB_DIR") {
        Ok(dir) if !dir.is_empty() => {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:lib_dir={dir}");
        }
        _ => println!(
            "cargo:warning=ptdp: no ptdp.pc for pkg-config and PTDP_LIB_DIR unset; linking -lptdp from the default paths"
        ),
    }
    println!("cargo:rustc-link-lib=dylib=ptdp");
}
