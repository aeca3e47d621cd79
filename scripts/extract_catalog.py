"""Regenerate stackpin/catalog/bundled-data.json from the bundled catalog YAML files (`make catalog`)."""

from stackpin.catalog import EXTRACT, catalog_extract
from stackpin.catalog.search import bundled

bundled().joinpath(EXTRACT).write_bytes(catalog_extract())
print(f"wrote stackpin/catalog/{EXTRACT}")
