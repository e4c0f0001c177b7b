"""The data model and its files: samples and records (types, recordcheck), input rows and files
(rowtext, io), images (images, imagesources) and results as pandas DataFrames (frames)."""
