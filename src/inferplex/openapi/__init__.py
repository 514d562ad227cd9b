"""The gateway's OpenAPI description: `spec` builds a document from operation tables, `operations` lists
the API routes of every dialect (the admin routes are listed in `admin/openapi.py`)."""
