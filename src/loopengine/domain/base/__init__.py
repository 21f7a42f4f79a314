"""The vocabulary every domain module uses: errors, ids, strict JSON, limits, schema checks, time."""
