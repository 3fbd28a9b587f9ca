//! Every compiled table carries where its figures come from, resolved exactly as
//! `tuned_schema` resolves it (a table's own source, else the file's): what
//! `tuner show` and `tuner explain` print is what the TOML says.

use std::path::Path;

use tuned_schema::folder::load_folder;

#[test]
fn compiled_tables_carry_the_source_the_files_give_them() {
    let tuned = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuned");
    let files = load_folder(&tuned, "tuned").expect("tuned/ loads");
    assert_eq!(files.len(), policy::PLATFORMS.len());
    for file in &files {
        let doc = &file.parsed.document;
        let platform = policy::PLATFORMS
            .iter()
            .find(|p| (p.arch, p.link) == (doc.platform.arch, doc.platform.link))
            .expect("every file is compiled");
        for table in &doc.tables {
            let info = platform.table(table.key).expect("every table is compiled");
            let origin = doc.origin(table);
            assert_eq!(info.source, origin.source.name());
            assert_eq!(info.source_inherited, origin.inherited);
            assert_eq!(info.citation, origin.citation);
            assert_eq!(info.evidence, origin.evidence);
            assert_eq!(info.date, origin.date);
            assert_eq!(info.tuner_version, origin.tuner_version);
            // A published table always says where it was read.
            if info.source == "published" {
                assert!(info.citation.is_some_and(|c| !c.trim().is_empty()));
            }
        }
    }
}

#[test]
fn show_prints_a_source_line_per_table() {
    let text = tuner::show::render(
        &tuner::tables::TableSet::Compiled,
        &tuner::show::ShowFilter::default(),
    );
    let tables: usize = policy::PLATFORMS.iter().map(|p| p.tables.len()).sum();
    assert_eq!(text.matches("  source: ").count(), tables, "{text}");
}
