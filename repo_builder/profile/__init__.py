"""What defines a profile: the parameter schema, the tensor contract, the template paths, YAML reading and the
Triton dtype spellings (:mod:`.dtypes`)."""
