"""The ironlb controller: allocates addresses from IPAddressPools to LoadBalancer Services."""
