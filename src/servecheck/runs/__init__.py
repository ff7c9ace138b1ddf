"""Result documents below the renderers and the history: field readers and the JSON codec
(versioned envelope, atomic writes), shared by `report` and `store` so neither imports the other."""
