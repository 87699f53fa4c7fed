"""What is packed and labelled: the on-disk format, scanning an image folder, labels files,
targets, box geometry and masks (their codec and their sampling), and checking, describing
and showing a packed data set."""
