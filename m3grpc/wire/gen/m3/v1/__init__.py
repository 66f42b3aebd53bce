"""Generated code of the m3.v1 proto package. Do not edit."""
