//! The Python the SDK tests drive clients with.

/// The Python that `scripts/test` set up (`RILLM_TEST_PYTHON`), if it can import
/// `imports` (`import a, b`). Without them the caller's test says it skipped, unless
/// `RILLM_REQUIRE_SDK` is set (CI), when it fails.
pub fn python_with(imports: &str) -> Option<String> {
    let python = std::env::var("RILLM_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let has = std::process::Command::new(&python)
        .args(["-c", &format!("import {imports}")])
        .output()
        .is_ok_and(|out| out.status.success());
    if has {
        return Some(python);
    }
    assert!(
        std::env::var_os("RILLM_REQUIRE_SDK").is_none(),
        "RILLM_REQUIRE_SDK is set but {python} cannot import {imports}"
    );
    eprintln!("skipped: {python} cannot import {imports} (scripts/test installs them); these checks did not run");
    None
}
