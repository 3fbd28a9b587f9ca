//! Reading a folder of table files: order, names in messages, and the folder-level
//! errors (missing, empty, not UTF-8).

use std::fs;
use std::path::PathBuf;

use tuned_schema::folder::load_folder;

/// A fresh, empty folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tuned-schema-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn platform_file(arch: &str) -> String {
    format!(
        "schema = 1\n[platform]\narch = \"{arch}\"\ngpu = \"t\"\nlink = \"nvlink\"\nsource = \"measured\"\n"
    )
}

#[test]
fn reads_toml_files_in_name_order_and_ignores_others() {
    let dir = scratch("order");
    fs::write(dir.join("sm90-nvlink.toml"), platform_file("sm90")).unwrap();
    fs::write(dir.join("sm100-nvlink.toml"), platform_file("sm100")).unwrap();
    fs::write(dir.join("README.md"), "not a table").unwrap();
    let files = load_folder(&dir, "../tuned/").unwrap();
    let names: Vec<&str> = files.iter().map(|f| f.parsed.path.as_str()).collect();
    assert_eq!(
        names,
        ["../tuned/sm100-nvlink.toml", "../tuned/sm90-nvlink.toml"]
    );
    assert_eq!(files[0].absolute, dir.join("sm100-nvlink.toml"));
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_missing_folder_is_an_error_naming_it() {
    let dir = scratch("missing").join("nope");
    let errors = load_folder(&dir, "nope").unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].file, "nope");
    assert_eq!((errors[0].line, errors[0].col), (0, 0));
    assert!(
        errors[0].message.starts_with("cannot read folder "),
        "{}",
        errors[0]
    );
}

#[test]
fn a_folder_without_toml_files_is_an_error() {
    let dir = scratch("empty");
    fs::write(dir.join("notes.txt"), "").unwrap();
    let errors = load_folder(&dir, "tuned").unwrap_err();
    assert!(
        errors[0]
            .to_string()
            .starts_with("tuned: no *.toml file in folder "),
        "{}",
        errors[0]
    );
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn invalid_utf8_is_located() {
    let dir = scratch("utf8");
    let mut bytes = platform_file("sm90").into_bytes();
    bytes.extend_from_slice(b"# caf\xE9\n");
    fs::write(dir.join("sm90-nvlink.toml"), bytes).unwrap();
    let errors = load_folder(&dir, "t").unwrap_err();
    assert_eq!(
        errors[0].to_string(),
        "t/sm90-nvlink.toml:7:6: the file is not valid UTF-8"
    );
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn errors_of_every_file_are_reported_together() {
    let dir = scratch("several");
    fs::write(dir.join("a.toml"), "schema = 1\n[platform\n").unwrap();
    fs::write(dir.join("b.toml"), platform_file("sm9")).unwrap();
    let errors = load_folder(&dir, "t").unwrap_err();
    let files: Vec<&str> = errors.iter().map(|e| e.file.as_str()).collect();
    assert_eq!(files, ["t/a.toml", "t/b.toml"]);
    assert!(
        errors[1].message.starts_with("unknown arch `sm9`"),
        "{}",
        errors[1]
    );
    assert_eq!((errors[1].line, errors[1].col), (3, 8));
    fs::remove_dir_all(dir).unwrap();
}
