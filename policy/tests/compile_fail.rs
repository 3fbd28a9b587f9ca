//! Every class of input error is a compile error naming file:line:col. The
//! expected compiler output is checked in next to each case (`tests/ui/*.stderr`);
//! regenerate with `TRYBUILD=overwrite cargo test -p colltune-policy --test compile_fail`
//! and review the diff.

#[test]
fn input_errors_are_compile_errors() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
