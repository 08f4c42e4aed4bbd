"""Read-side analysis of the store: lineage, insights and the JSON documents of both."""
