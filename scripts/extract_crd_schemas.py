"""Regenerate stackpin/validate/crds/crd-json-schemas.json from the bundled CRD YAML (`make crds`)."""

from stackpin.validate.manifests import _CRD_EXTRACT, crd_extract

_CRD_EXTRACT.write_text(crd_extract())
print(f"wrote {_CRD_EXTRACT}")
