//! The macro's input: `"path"` or `"path", relative_to = file`.

use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitStr, Token};

/// What a relative folder path is resolved against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// The calling crate's `CARGO_MANIFEST_DIR` (the default).
    Manifest,
    /// The folder of the source file that invokes the macro; used by the
    /// compile-fail tests, whose crates are built from a generated manifest.
    File,
}

pub struct Args {
    pub folder: LitStr,
    pub base: Base,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let folder: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected the folder of *.toml files as a string, e.g. include_tuned!(\"tuned\")",
            )
        })?;
        let mut base = Base::Manifest;
        if input.parse::<Option<Token![,]>>()?.is_some() && !input.is_empty() {
            let key: Ident = input.parse()?;
            if key != "relative_to" {
                return Err(syn::Error::new(
                    key.span(),
                    "expected `relative_to = manifest` or `relative_to = file`",
                ));
            }
            input.parse::<Token![=]>()?;
            let value: Ident = input.parse()?;
            base = match value.to_string().as_str() {
                "manifest" => Base::Manifest,
                "file" => Base::File,
                _ => {
                    return Err(syn::Error::new(
                        value.span(),
                        "expected `manifest` (the calling crate's Cargo.toml folder) or `file` (the invoking source file's folder)",
                    ));
                }
            };
            input.parse::<Option<Token![,]>>()?;
        }
        if !input.is_empty() {
            return Err(input.error("unexpected input after the folder path"));
        }
        Ok(Args { folder, base })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> syn::Result<Args> {
        syn::parse_str(text)
    }

    #[test]
    fn folder_alone_is_relative_to_the_manifest() {
        let args = parse("\"../tuned\"").unwrap();
        assert_eq!(args.folder.value(), "../tuned");
        assert_eq!(args.base, Base::Manifest);
    }

    #[test]
    fn relative_to_file() {
        let args = parse("\"ui/bad\", relative_to = file").unwrap();
        assert_eq!(args.base, Base::File);
        assert_eq!(
            parse("\"x\", relative_to = manifest,").unwrap().base,
            Base::Manifest
        );
    }

    #[test]
    fn refuses_other_input() {
        let message = |text| parse(text).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message("../tuned").starts_with("expected the folder"));
        assert!(message("\"x\", relative = file").starts_with("expected `relative_to"));
        assert!(message("\"x\", relative_to = crate_root").starts_with("expected `manifest`"));
        assert!(message("\"x\" \"y\"").starts_with("unexpected input"));
    }
}
