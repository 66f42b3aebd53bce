"""Generated code of the m3 proto package. Do not edit."""
