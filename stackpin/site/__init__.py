"""Site facts measured on a site's own GPU nodes: the probe (`stackpin site probe`) and its import into a
site overlay (`stackpin site import`); the overlay's model and how it is laid over the catalog live in
stackpin.catalog.site."""
