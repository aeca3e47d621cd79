"""Engine releases: read a published vLLM, ai-dynamo or flashinfer-python package into its catalog
(`engines add`), and compare two releases' catalogs (`engines diff`). Reads the catalog stage only."""
