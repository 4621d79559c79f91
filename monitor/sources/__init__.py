"""External relations an invariant declares in its `source:` header (an object-store prefix,
a local folder), listed at run time and bound into its query as rows.

header.py is the header's model, binding.py the pure text and parameters invmon prepends,
listing.py what every lister shares (bounds, grace, the run-time entry point), and one
lister per backend named after what it uses: folder.py (the file system), boto3_s3.py (S3
and anything S3-compatible, through boto3: the `s3` extra, imported only when such a source
is listed).
"""
